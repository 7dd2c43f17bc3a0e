package compare

import (
	"bytes"
	"encoding/json"
	"slices"
)

// notMeasuredByPyTorch are the figures of a gpumem device that PyTorch's
// model has no counterpart for: it never moves memory.
var notMeasuredByPyTorch = []string{"relocations", "bytes_moved", "copy_seconds", "min_capacity_relocations", "min_capacity_bytes_moved", "min_capacity_copy_seconds",
	"min_capacity_compactions", "min_capacity_compact_bytes_moved", "min_capacity_compact_pages_freed"}

// notSearched are the figures of the smallest-capacity search, which
// -no-search (Options.SkipCapacity) does not run.
var notSearched = []string{"min_capacity_bytes", "min_capacity_over_peak_live", "capacity_probes", "min_device_bytes", "min_capacity_relocations", "min_capacity_bytes_moved", "min_capacity_copy_seconds",
	"min_capacity_compactions", "min_capacity_compact_bytes_moved", "min_capacity_compact_pages_freed"}

// MarshalJSON writes the result with the figures its policy does not
// measure left out rather than written as 0, so a reader can tell "no
// relocation" from "cannot relocate": PyTorch's rows have no relocation
// figures, and a run without the capacity search has no smallest-capacity
// ones.
func (p PolicyResult) MarshalJSON() ([]byte, error) {
	type plain PolicyResult // no MarshalJSON: no recursion
	b, err := json.Marshal(plain(p))
	if err != nil {
		return nil, err
	}
	var drop []string
	if p.TorchConf != nil {
		drop = append(drop, notMeasuredByPyTorch...)
	}
	if p.MinCapacity == 0 {
		drop = append(drop, notSearched...)
	}
	if len(drop) == 0 {
		return b, nil
	}
	return dropKeys(b, drop)
}

// dropKeys removes keys from the JSON object b, keeping the others in
// their order (a map would sort them, and rows of one table would read
// differently).
func dropKeys(b []byte, keys []string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	out := []byte{'{'}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		key := tok.(string)
		if slices.Contains(keys, key) {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		k, _ := json.Marshal(key)
		out = append(append(append(out, k...), ':'), v...)
	}
	return append(out, '}'), nil
}
