package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/trace"
	"github.com/gpumem/gpumem/trace/compare"
)

// loadSource reads FILE (a .jsonl trace, or a PyTorch snapshot: pickle or
// JSON, optionally gzipped, at most maxSnapshot bytes decompressed), or the
// embedded default trace when path is "".
func loadSource(path string, maxSnapshot int64) (compare.Source, error) {
	if path == "" {
		name, data := trace.Default()
		return decodeJSONL(name+" (embedded)", bytes.NewReader(data))
	}
	f, err := os.Open(path)
	if err != nil {
		return compare.Source{}, err
	}
	defer f.Close()
	if strings.HasSuffix(path, ".jsonl") {
		return decodeJSONL(filepath.Base(path), f)
	}
	snap, err := trace.ReadSnapshot(f, trace.SnapshotOptions{MaxBytes: maxSnapshot})
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

// snapshotHint adds to a snapshot error the flag that changes it.
func snapshotHint(err error) error {
	var tooLarge *trace.TooLargeError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("%w (raise -max-snapshot to read it)", err)
	}
	return err
}
