package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/compare"
	"github.com/gpumem/gpumem/trace"
)

// loadSource reads FILE (a .jsonl trace, or a PyTorch snapshot: pickle or
// JSON, optionally gzipped, at most maxSnapshot bytes decompressed), or the
// embedded default trace when path is "". device ≥ 0 chooses a snapshot's
// device trace (-device); -1 reads its only one.
func loadSource(path string, maxSnapshot int64, device int) (compare.Source, error) {
	if path == "" {
		name, data := trace.Default()
		return decodeJSONL(name+" (embedded)", bytes.NewReader(data))
	}
	f, err := os.Open(path)
	if err != nil {
		return compare.Source{}, err
	}
	defer f.Close()
	// The content decides, not the name: a gzipped or upper-case .jsonl
	// is a trace, a snapshot named .jsonl a snapshot.
	kind, content, gzipped, err := trace.Sniff(f)
	if errors.Is(err, trace.ErrUnknownFormat) && namedJSONL(path) {
		// Named a trace and neither format: the JSONL decoder names the
		// line and what is wrong with it.
		kind, err = trace.InputJSONL, nil
	}
	if err != nil {
		return compare.Source{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if kind == trace.InputJSONL {
		if device >= 0 {
			return compare.Source{}, fmt.Errorf("%w: -device chooses among a snapshot's devices; %s is a gpumem trace, which has one", errUsage, path)
		}
		if gzipped {
			// A gzip stream can expand a thousandfold: the same bound as a
			// snapshot's keeps a crafted file from filling memory.
			content = &boundedReader{r: content, limit: cmp.Or(maxSnapshot, trace.DefaultMaxSnapshotBytes)}
		}
		src, err := decodeJSONL(filepath.Base(path), content)
		if err != nil {
			return compare.Source{}, snapshotHint(err)
		}
		return src, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return compare.Source{}, fmt.Errorf("reading snapshot %s: %w", path, err)
	}
	opts := trace.SnapshotOptions{MaxBytes: maxSnapshot}
	if device >= 0 {
		opts.ChooseDevice, opts.Device = true, device
	}
	snap, err := trace.ReadSnapshot(f, opts)
	if err != nil {
		return compare.Source{}, fmt.Errorf("reading snapshot %s: %w", path, snapshotHint(err))
	}
	src, err := compare.FromSnapshot(filepath.Base(path), snap)
	if err != nil {
		return compare.Source{}, fmt.Errorf("reading snapshot %s: %w", path, err)
	}
	if len(src.Events) == 0 {
		return compare.Source{}, fmt.Errorf("%w: snapshot %s has no trace entries and no live blocks: nothing to replay", compare.ErrEmptyTrace, path)
	}
	src.Frames = compare.FramesFromFile(path, snap) // -frames: read again, only for failing allocations
	return src, nil
}

func decodeJSONL(name string, r io.Reader) (compare.Source, error) {
	var events []trace.Event
	for e, err := range trace.Decode(r) {
		if err != nil {
			return compare.Source{}, fmt.Errorf("reading %s: %w", name, err)
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		return compare.Source{}, fmt.Errorf("%w: %s has no events", compare.ErrEmptyTrace, name)
	}
	return compare.Source{Name: name, Events: slices.Clip(events)}, nil
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
		return 0, &trace.TooLargeError{Limit: b.limit}
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
