package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpumem/gpumem/internal/analysis/compare"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/units"
)

// loadSource is readInput for the commands that replay FILE's events
// (replay, advise): FILE, or the embedded trace when path is "", read with
// -max-snapshot and -device (-1: none).
func loadSource(path string, maxSnapshot int64, device int) (compare.Source, error) {
	in, err := readInput(path, inputOptions{maxSnapshot: maxSnapshot, device: device})
	return in.src, err
}

// inputOptions are the flags that change how FILE is read.
type inputOptions struct {
	maxSnapshot int64 // -max-snapshot; 0 for trace.DefaultMaxSnapshotBytes
	device      int   // -device: a snapshot's device; -1 reads the one with data
	noPrelude   bool  // convert -no-prelude
}

// input is FILE as read: the events to replay, and the snapshot they came
// from (nil for a native trace), whose counts convert reports.
type input struct {
	src  compare.Source
	snap *trace.Snapshot
	// nothing, when set, says why the snapshot's device has no events to
	// replay (readInputs keeps such a device of several, to report it).
	nothing string
}

// stdin is what FILE "-" reads: the process's standard input (the tests
// give their own).
var stdin io.Reader = os.Stdin

// stdinName stands for FILE "-" in reports and messages.
const stdinName = "standard input"

// errStdinTooLarge is the error for standard input past -max-snapshot.
var errStdinTooLarge = errors.New("standard input is too large")

// readInput reads FILE for replay, advise, diff and convert alike, so that
// an input gets the same verdict and the same message whichever command
// reads it: a gpumem trace (JSONL, with its header's device) or a PyTorch
// snapshot (pickle or JSON, at most maxSnapshot bytes decompressed), each
// optionally gzipped, told apart by content, never by name (trace.Sniff);
// standard input for "-"; the embedded default trace when path is "". A
// message speaks of a trace or of a snapshot, never of both, and names the
// flag that changes it. A snapshot with data for several devices is a
// usage error listing them (-device chooses); readInputs reads each.
func readInput(path string, o inputOptions) (input, error) {
	ins, err := readFile(path, o, false)
	if err != nil {
		return input{}, err
	}
	return ins[0], nil
}

// readInputs is readInput for the commands that report on each device of
// a snapshot (replay, advise): one input per device with data, in order (a
// native trace's one). A device of several with nothing to replay is kept,
// its input's nothing saying why; a snapshot's only device with nothing
// to replay is an error, as for readInput.
func readInputs(path string, o inputOptions) ([]input, error) {
	return readFile(path, o, true)
}

// readFile is readInput (all false) and readInputs (all true).
func readFile(path string, o inputOptions, all bool) ([]input, error) {
	if path == "" {
		name, data := trace.Default()
		src, err := compare.DecodeTrace(name+" (embedded)", bytes.NewReader(data))
		return []input{{src: src}}, err
	}
	limit := cmp.Or(o.maxSnapshot, trace.DefaultMaxSnapshotBytes)
	var f io.ReadSeeker
	name, where := filepath.Base(path), path
	var data []byte // standard input's bytes, read whole
	if path == "-" {
		name, where = stdinName, stdinName
		var err error
		if data, err = io.ReadAll(io.LimitReader(stdin, limit+1)); err != nil {
			return nil, fmt.Errorf("reading %s: %w", stdinName, err)
		}
		if int64(len(data)) > limit {
			return nil, fmt.Errorf("%w: more than the limit of %d bytes (raise -max-snapshot to read it, or give the FILE)", errStdinTooLarge, limit)
		}
		f = bytes.NewReader(data)
	} else {
		file, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer file.Close()
		f = file
	}
	// The content decides, not the name: a gzipped or upper-case .jsonl
	// is a trace, a snapshot named .jsonl a snapshot.
	kind, content, gzipped, err := trace.Sniff(f)
	if errors.Is(err, trace.ErrUnknownFormat) && namedJSONL(path) {
		// Named a trace and neither format: the JSONL decoder names the
		// line and what is wrong with it, or says there are no events.
		kind, err = trace.InputJSONL, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", where, err)
	}
	if kind == trace.InputJSONL {
		if o.device >= 0 {
			return nil, fmt.Errorf("%w: -device chooses among a snapshot's devices; %s is a gpumem trace, which has one", errUsage, where)
		}
		if gzipped {
			// A gzip stream can expand a thousandfold: the same bound as a
			// snapshot's keeps a crafted file from filling memory.
			content = &boundedReader{r: content, limit: limit}
		}
		src, err := compare.DecodeTrace(name, content)
		var tooLarge *trace.TooLargeError
		if errors.As(err, &tooLarge) {
			// Past the bound, whatever line the decoder had reached: the
			// size is the problem, not an event.
			return nil, fmt.Errorf("reading %s: %w", where, snapshotHint(tooLarge))
		}
		if err != nil {
			return nil, err
		}
		return []input{{src: src}}, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("reading snapshot %s: %w", where, err)
	}
	opts := trace.SnapshotOptions{MaxBytes: o.maxSnapshot, NoPrelude: o.noPrelude}
	if o.device >= 0 {
		opts.ChooseDevice, opts.Device = true, o.device
	}
	var snaps []*trace.Snapshot
	if all {
		snaps, err = trace.ReadSnapshotDevices(f, opts)
	} else {
		var s *trace.Snapshot
		s, err = trace.ReadSnapshot(f, opts)
		snaps = []*trace.Snapshot{s}
	}
	if err != nil {
		return nil, snapshotError(where, err)
	}
	ins := make([]input, 0, len(snaps))
	for _, snap := range snaps {
		src, err := compare.FromSnapshot(deviceName(name, snap), snap)
		if err != nil {
			return nil, fmt.Errorf("reading snapshot %s: %w", where, err)
		}
		in := input{src: src, snap: snap}
		if len(src.Events) == 0 {
			in.nothing = nothingToReplay(snap)
			if len(snaps) == 1 {
				return nil, fmt.Errorf("%w: snapshot %s%s: %s", compare.ErrEmptyTrace, where, deviceSuffix(snap), in.nothing)
			}
		}
		// -frames: read again, only for failing allocations.
		if data != nil {
			s := snap
			in.src.Frames = func(entries []int) (map[int][]trace.TorchFrame, error) {
				m, err := s.ReadFrames(bytes.NewReader(data), entries)
				if err != nil {
					return nil, fmt.Errorf("reading the stack frames of %s: %w", stdinName, err)
				}
				return m, nil
			}
		} else {
			in.src.Frames = compare.FramesFromFile(path, snap)
		}
		ins = append(ins, in)
	}
	return ins, nil
}

// deviceName is a snapshot device's report name: the file's, with the
// device when it is not device 0 or the snapshot has data for several, so
// that a report never leaves the device to be guessed.
func deviceName(name string, s *trace.Snapshot) string {
	return name + deviceSuffix(s)
}

// deviceSuffix is deviceName's " (device N)", or "".
func deviceSuffix(s *trace.Snapshot) string {
	if s.Device == 0 && len(s.Devices) <= 1 {
		return ""
	}
	return fmt.Sprintf(" (device %d)", s.Device)
}

// nothingToReplay says why a snapshot's device has no events: what it
// holds instead (cached segments, entries without allocations, markers),
// in the reader's terms.
func nothingToReplay(s *trace.Snapshot) string {
	var d *trace.DeviceData
	for i := range s.Devices {
		if s.Devices[i].Device == s.Device {
			d = &s.Devices[i]
		}
	}
	if d == nil {
		// No device has data.
		msg := "no segments and no trace entries"
		if n := s.Counts.Snapshots; n > 0 {
			msg = fmt.Sprintf("no segments and no trace entries but %d snapshot marker%s", n, pluralS(n))
		}
		return msg + ": nothing to replay"
	}
	msg := "no allocation in its trace"
	if d.Entries > 0 {
		msg = fmt.Sprintf("no allocation among its %d trace entries", d.Entries)
		if d.Entries == 1 {
			msg = "no allocation in its 1 trace entry"
		}
	}
	msg += " and no live block at the dump: nothing to replay"
	if d.Segments > 0 {
		msg += fmt.Sprintf("; PyTorch held %s in %d segment%s at the dump, all of it cached and free", units.Bytes(d.Reserved), d.Segments, pluralS(d.Segments))
	}
	return msg
}

func pluralS(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// namedJSONL reports whether path is named as a JSONL trace (.jsonl or
// .jsonl.gz, any case).
func namedJSONL(path string) bool {
	p := strings.ToLower(path)
	return strings.HasSuffix(p, ".jsonl") || strings.HasSuffix(p, ".jsonl.gz")
}

// boundedReader fails with a *trace.TooLargeError once its reader has
// yielded more than limit bytes.
type boundedReader struct {
	r     io.Reader
	limit int64 // > 0
	read  int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if room := b.limit - b.read + 1; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	if b.read > b.limit {
		return 0, &trace.TooLargeError{Limit: b.limit, Kind: trace.InputJSONL}
	}
	return n, err
}

// snapshotHint adds to a snapshot error the flag that changes it.
func snapshotHint(err error) error {
	var tooLarge *trace.TooLargeError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("%w (raise -max-snapshot to read it)", err)
	}
	return err
}

// snapshotError is a snapshot reading error in the user's terms: naming
// the file and the flag that changes it. A device choice the user must
// make (several devices, or -device naming one without data while others
// have some) is a usage error.
func snapshotError(where string, err error) error {
	var several *trace.SeveralDevicesError
	if errors.As(err, &several) {
		several.Choose = "with -device N"
		return fmt.Errorf("%w: reading snapshot %s: %w", errUsage, where, err)
	}
	var none *trace.NoDeviceDataError
	if errors.As(err, &none) {
		if len(none.Devices) == 0 {
			return fmt.Errorf("%w: snapshot %s: %w: nothing to replay", compare.ErrEmptyTrace, where, err)
		}
		none.Choose = "with -device N"
		return fmt.Errorf("%w: reading snapshot %s: %w", errUsage, where, err)
	}
	return fmt.Errorf("reading snapshot %s: %w", where, snapshotHint(err))
}
