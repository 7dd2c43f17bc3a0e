// The settings a snapshot recorded: torch.cuda.memory._dump_snapshot writes
// them under "allocator_settings" (torch/csrc/cuda/memory_snapshot.cpp,
// _memory_snapshot_pickled, from NativeCachingAllocator::snapshot's
// config_metadata). The dict holds:
//
//	"PYTORCH_CUDA_ALLOC_CONF"       str   the last conf line parsed ("" if none)
//	"max_split_size"                int   bytes; SIZE_MAX pickled as int64, so −1 = unlimited
//	"garbage_collection_threshold"  float 0 = off
//	"expandable_segments"           bool
//	"roundup_power2_divisions"      dict  "1", "2", "4", … "32768" (MiB) → divisions
//	"release_lock_on_cudamalloc", "pinned_use_cuda_host_register",
//	"pinned_num_register_threads", "graph_capture_record_stream_reuse"
//	                                      not modelled, ignored
//
// The typed fields are what the allocator held, so they win; the conf line
// adds what the dict lacks (max_non_split_rounding_mb and the unmodelled
// options, for String). Older PyTorch writes no allocator_settings at all:
// the caller then uses the defaults (the zero Settings) and says so.

package torch

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
)

// Snapshot field names of "allocator_settings".
const (
	SnapshotConf               = "PYTORCH_CUDA_ALLOC_CONF"
	SnapshotMaxSplitSize       = "max_split_size"
	SnapshotGCThreshold        = "garbage_collection_threshold"
	SnapshotExpandableSegments = "expandable_segments"
	SnapshotRoundup            = "roundup_power2_divisions"
)

// SettingsFromSnapshot builds Settings from a snapshot's decoded
// "allocator_settings" dict, as the unpickler gives values: strings, bools,
// int64 or *big.Int, float64, nested dicts as map[string]any (int, uint64
// and integral float64 are accepted too). A missing field keeps the
// default. The error is a *ConfError whose Key names the field
// ("allocator_settings.max_split_size"), wrapping ErrConfValue for a wrong
// type or range, or ParseConf's error for a bad conf line.
func SettingsFromSnapshot(m map[string]any) (Settings, error) {
	var s Settings
	if v, ok := m[SnapshotConf]; ok && v != nil {
		line, ok := v.(string)
		if !ok {
			return Settings{}, fieldError(SnapshotConf, v, "want a string")
		}
		parsed, err := ParseConf(line)
		if err != nil {
			return Settings{}, fmt.Errorf("allocator_settings.%s %q: %w", SnapshotConf, line, err)
		}
		s = parsed
	}
	if v, ok := m[SnapshotExpandableSegments]; ok {
		b, ok := v.(bool)
		if !ok {
			return Settings{}, fieldError(SnapshotExpandableSegments, v, "want a bool")
		}
		s.ExpandableSegments = b
	}
	if v, ok := m[SnapshotMaxSplitSize]; ok {
		n, ok := snapshotInt(v)
		switch {
		case !ok:
			return Settings{}, fieldError(SnapshotMaxSplitSize, v, "want an integer (bytes, -1 for unlimited)")
		case n.Sign() < 0 || n.Cmp(new(big.Int).SetUint64(math.MaxUint64)) == 0:
			s.MaxSplitSizeMB = 0
		case !n.IsUint64() || n.Uint64()%megabyte != 0:
			return Settings{}, fieldError(SnapshotMaxSplitSize, v, "want a whole number of MiB")
		default:
			s.MaxSplitSizeMB = n.Uint64() / megabyte
		}
	}
	if v, ok := m[SnapshotGCThreshold]; ok {
		f, ok := v.(float64)
		if !ok {
			n, isInt := snapshotInt(v)
			if !isInt || n.Sign() != 0 {
				return Settings{}, fieldError(SnapshotGCThreshold, v, "want a float in [0, 1)")
			}
		}
		s.GarbageCollectionThreshold = f
	}
	if v, ok := m[SnapshotRoundup]; ok && v != nil {
		table, ok := v.(map[string]any)
		if !ok {
			return Settings{}, fieldError(SnapshotRoundup, v, "want a dict of interval (MiB) to divisions")
		}
		var d Divisions
		for k, dv := range table {
			key, err := strconv.ParseUint(k, 10, 64)
			i := 0
			for i < DivisionIntervals && divisionKeyMB(i) != key {
				i++
			}
			if err != nil || i == DivisionIntervals {
				return Settings{}, fieldError(SnapshotRoundup+"."+k, dv, "interval keys are 1, 2, 4, … 32768")
			}
			n, ok := snapshotInt(dv)
			if !ok || !n.IsUint64() {
				return Settings{}, fieldError(SnapshotRoundup+"."+k, dv, "want a non-negative integer")
			}
			d[i] = n.Uint64()
		}
		s.RoundupPower2Divisions = d
	}
	if err := s.Validate(); err != nil {
		return Settings{}, fmt.Errorf("allocator_settings: %w", err)
	}
	return s, nil
}

func fieldError(field string, v any, reason string) error {
	return &ConfError{Key: "allocator_settings." + field, Value: fmt.Sprint(v), Err: ErrConfValue, Reason: reason}
}

// snapshotInt reads an integer as the unpickler or a caller may give it.
func snapshotInt(v any) (*big.Int, bool) {
	switch n := v.(type) {
	case int64:
		return big.NewInt(n), true
	case int:
		return big.NewInt(int64(n)), true
	case uint64:
		return new(big.Int).SetUint64(n), true
	case *big.Int:
		return n, n != nil
	case float64:
		if n == math.Trunc(n) && math.Abs(n) < 1<<63 {
			return big.NewInt(int64(n)), true
		}
	}
	return nil, false
}
