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

	"github.com/gpumem/gpumem/compare"
	"github.com/gpumem/gpumem/trace"
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
	device      int   // -device: a snapshot's device trace; -1 reads its only one
	noPrelude   bool  // convert -no-prelude
}

// input is FILE as read: the events to replay, and the snapshot they came
// from (nil for a native trace), whose counts convert reports.
type input struct {
	src  compare.Source
	snap *trace.Snapshot
}

// readInput reads FILE for replay, advise and convert alike, so that an
// input gets the same verdict and the same message whichever command reads
// it: a gpumem trace (JSONL, with its header's device) or a PyTorch
// snapshot (pickle or JSON, at most maxSnapshot bytes decompressed), each
// optionally gzipped, told apart by content, never by name (trace.Sniff);
// the embedded default trace when path is "". A message speaks of a trace
// or of a snapshot, never of both, and names the flag that changes it.
func readInput(path string, o inputOptions) (input, error) {
	if path == "" {
		name, data := trace.Default()
		src, err := compare.DecodeTrace(name+" (embedded)", bytes.NewReader(data))
		return input{src: src}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return input{}, err
	}
	defer f.Close()
	// The content decides, not the name: a gzipped or upper-case .jsonl
	// is a trace, a snapshot named .jsonl a snapshot.
	kind, content, gzipped, err := trace.Sniff(f)
	if errors.Is(err, trace.ErrUnknownFormat) && namedJSONL(path) {
		// Named a trace and neither format: the JSONL decoder names the
		// line and what is wrong with it, or says there are no events.
		kind, err = trace.InputJSONL, nil
	}
	if err != nil {
		return input{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if kind == trace.InputJSONL {
		if o.device >= 0 {
			return input{}, fmt.Errorf("%w: -device chooses among a snapshot's devices; %s is a gpumem trace, which has one", errUsage, path)
		}
		if gzipped {
			// A gzip stream can expand a thousandfold: the same bound as a
			// snapshot's keeps a crafted file from filling memory.
			content = &boundedReader{r: content, limit: cmp.Or(o.maxSnapshot, trace.DefaultMaxSnapshotBytes)}
		}
		src, err := compare.DecodeTrace(filepath.Base(path), content)
		var tooLarge *trace.TooLargeError
		if errors.As(err, &tooLarge) {
			// Past the bound, whatever line the decoder had reached: the
			// size is the problem, not an event.
			return input{}, fmt.Errorf("reading %s: %w", path, snapshotHint(tooLarge))
		}
		if err != nil {
			return input{}, err
		}
		return input{src: src}, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return input{}, fmt.Errorf("reading snapshot %s: %w", path, err)
	}
	opts := trace.SnapshotOptions{MaxBytes: o.maxSnapshot, NoPrelude: o.noPrelude}
	if o.device >= 0 {
		opts.ChooseDevice, opts.Device = true, o.device
	}
	snap, err := trace.ReadSnapshot(f, opts)
	if err != nil {
		return input{}, fmt.Errorf("reading snapshot %s: %w", path, snapshotHint(err))
	}
	src, err := compare.FromSnapshot(filepath.Base(path), snap)
	if err != nil {
		return input{}, fmt.Errorf("reading snapshot %s: %w", path, err)
	}
	if len(src.Events) == 0 {
		return input{}, fmt.Errorf("%w: snapshot %s has no trace entries and no live blocks: no events", compare.ErrEmptyTrace, path)
	}
	src.Frames = compare.FramesFromFile(path, snap) // -frames: read again, only for failing allocations
	return input{src: src, snap: snap}, nil
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
	var several *trace.SeveralDevicesError
	if errors.As(err, &several) {
		return fmt.Errorf("%w with -device N", err)
	}
	return err
}
