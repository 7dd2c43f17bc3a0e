// The allocator settings users give PyTorch in PYTORCH_CUDA_ALLOC_CONF
// (c10/core/AllocatorConfig.{h,cpp}, c10/cuda/CUDAAllocatorConfig.cpp),
// typed. The zero Settings is PyTorch's defaults, so a Config that names no
// settings replays exactly as before settings existed.
//
// One line, two readers: ParseConf reads the syntax PyTorch reads (conf.go)
// and String writes a line both PyTorch and ParseConf read back to the same
// Settings. String writes the modelled keys in one fixed order (the order of
// the fields below) and only those that differ from the defaults, then the
// accepted-but-unmodelled options in the order given; a line written in that
// order comes back byte for byte.

package torch

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Settings are the caching allocator's settings. The zero value is
// PyTorch's defaults: no expandable segments, every block splittable, a
// 20 MiB reuse margin for oversize blocks, no power-of-two rounding, no
// garbage collection.
type Settings struct {
	// ExpandableSegments is expandable_segments:True: one growing virtual
	// range per pool and stream instead of one cudaMalloc per segment
	// (expandable.go).
	ExpandableSegments bool
	// MaxSplitSizeMB is max_split_size_mb: blocks of this many MiB or more
	// are "oversize", never split, and released first under memory
	// pressure. 0 = unlimited (PyTorch's SIZE_MAX); otherwise at least
	// MinSplitSizeMB.
	MaxSplitSizeMB uint64
	// MaxNonSplitRoundingMB is max_non_split_rounding_mb: an oversize block
	// serves a request only if it is less than this many MiB larger. 0 =
	// PyTorch's default, kLargeBuffer (20 MiB); otherwise at least
	// MinSplitSizeMB. It matters only with MaxSplitSizeMB set.
	MaxNonSplitRoundingMB uint64
	// RoundupPower2Divisions is roundup_power2_divisions, per power-of-two
	// size interval (roundup.go). All zero = no rounding beyond 512 B.
	RoundupPower2Divisions Divisions
	// GarbageCollectionThreshold is garbage_collection_threshold: with a
	// capacity set, when reserved bytes exceed this fraction of it, cached
	// whole segments unused the longest are released before a new segment
	// is allocated (gc.go). 0 = off; otherwise in (0, 1).
	GarbageCollectionThreshold float64
	// Unmodelled are options PyTorch accepts that do not change what the
	// caching allocator reserves (pinned host memory, lock release,
	// backend:native, ...), kept so String gives the whole line back.
	Unmodelled []Option
}

// Option is one key:value pair of a conf line kept verbatim.
type Option struct {
	Key, Value string
}

// MinSplitSizeMB is the smallest max_split_size_mb and
// max_non_split_rounding_mb PyTorch accepts: kLargeBuffer / 1 MiB.
const MinSplitSizeMB = LargeBuffer / megabyte

// megabyte is PyTorch's kMB: conf values in "mb" are MiB.
const megabyte = 1 << 20

// maxSplitMB is PyTorch's clamp, SIZE_MAX / kMB: a larger value is stored
// as this many MiB, so the size in bytes never overflows.
const maxSplitMB = math.MaxUint64 / megabyte

// Conf keys, as PYTORCH_CUDA_ALLOC_CONF spells them.
const (
	KeyExpandableSegments         = "expandable_segments"
	KeyMaxSplitSize               = "max_split_size_mb"
	KeyMaxNonSplitRounding        = "max_non_split_rounding_mb"
	KeyRoundupPower2Divisions     = "roundup_power2_divisions"
	KeyGarbageCollectionThreshold = "garbage_collection_threshold"
)

// Sentinels that a *ConfError wraps, so callers can branch with errors.Is.
var (
	// ErrConfSyntax: the line is not comma-separated key:value pairs (a
	// missing ':' or ',', an unclosed '[').
	ErrConfSyntax = errors.New("PYTORCH_CUDA_ALLOC_CONF syntax")
	// ErrConfUnknownKey: a key PyTorch does not know either.
	ErrConfUnknownKey = errors.New("unknown PYTORCH_CUDA_ALLOC_CONF key")
	// ErrConfValue: a known key with a value PyTorch refuses (out of range,
	// not a power of two, not True/False).
	ErrConfValue = errors.New("bad PYTORCH_CUDA_ALLOC_CONF value")
	// ErrConfUnmodelled: a valid setting under which the model would not be
	// PyTorch's caching allocator (backend:cudaMallocAsync).
	ErrConfUnmodelled = errors.New("PYTORCH_CUDA_ALLOC_CONF setting not modelled")
)

// ConfError is returned by ParseConf, Settings.Validate and
// SettingsFromSnapshot. Key names the offending conf key (or snapshot
// field), Value what was given, Reason what is allowed. It unwraps to one
// of the ErrConf sentinels.
type ConfError struct {
	Key, Value, Reason string
	Err                error
}

func (e *ConfError) Error() string {
	switch {
	case e.Key == "":
		return fmt.Sprintf("%v: %s", e.Err, e.Reason)
	case e.Value == "":
		return fmt.Sprintf("%v: %s: %s", e.Err, e.Key, e.Reason)
	}
	return fmt.Sprintf("%v: %s:%s: %s", e.Err, e.Key, e.Value, e.Reason)
}

func (e *ConfError) Unwrap() error { return e.Err }

// Validate checks the ranges PyTorch's parser enforces, so a Settings built
// in code cannot reach the model with a value PyTorch would refuse. The
// error is a *ConfError naming the key.
func (s Settings) Validate() error {
	bad := func(key string, v any, reason string) error {
		return &ConfError{Key: key, Value: fmt.Sprint(v), Reason: reason, Err: ErrConfValue}
	}
	if s.MaxSplitSizeMB != 0 && (s.MaxSplitSizeMB < MinSplitSizeMB || s.MaxSplitSizeMB > maxSplitMB) {
		return bad(KeyMaxSplitSize, s.MaxSplitSizeMB, fmt.Sprintf("must be at least %d (kLargeBuffer) and at most %d", MinSplitSizeMB, uint64(maxSplitMB)))
	}
	if s.MaxNonSplitRoundingMB != 0 && (s.MaxNonSplitRoundingMB < MinSplitSizeMB || s.MaxNonSplitRoundingMB > maxSplitMB) {
		return bad(KeyMaxNonSplitRounding, s.MaxNonSplitRoundingMB, fmt.Sprintf("must be at least %d (kLargeBuffer) and at most %d", MinSplitSizeMB, uint64(maxSplitMB)))
	}
	if g := s.GarbageCollectionThreshold; g != 0 && !(g > 0 && g < 1) {
		return bad(KeyGarbageCollectionThreshold, g, "must be in (0.0, 1.0); omit the key to turn garbage collection off")
	}
	for i, d := range s.RoundupPower2Divisions {
		if d != 0 && d&(d-1) != 0 {
			return bad(KeyRoundupPower2Divisions, d, fmt.Sprintf("divisions for interval %d (from %d MiB) must be a power of two or 0", i, divisionKeyMB(i)))
		}
	}
	return nil
}

// maxSplitBytes is max_split_size in bytes, math.MaxUint64 when unlimited
// (PyTorch's SIZE_MAX, so every comparison reads as in the source).
func (s Settings) maxSplitBytes() uint64 {
	if s.MaxSplitSizeMB == 0 {
		return math.MaxUint64
	}
	return s.MaxSplitSizeMB * megabyte
}

// nonSplitRoundingBytes is max_non_split_rounding_size in bytes.
func (s Settings) nonSplitRoundingBytes() uint64 {
	if s.MaxNonSplitRoundingMB == 0 {
		return LargeBuffer
	}
	return s.MaxNonSplitRoundingMB * megabyte
}

// IsDefault reports whether s is PyTorch's defaults as far as the model is
// concerned (unmodelled options aside).
func (s Settings) IsDefault() bool {
	return !s.ExpandableSegments && s.MaxSplitSizeMB == 0 && s.MaxNonSplitRoundingMB == 0 &&
		s.RoundupPower2Divisions == (Divisions{}) && s.GarbageCollectionThreshold == 0
}

// String is the PYTORCH_CUDA_ALLOC_CONF line for s: "" for the defaults.
// ParseConf(s.String()) gives s back (with Unmodelled normalised as parsed).
func (s Settings) String() string {
	var parts []string
	add := func(k, v string) { parts = append(parts, k+":"+v) }
	if s.ExpandableSegments {
		add(KeyExpandableSegments, "True")
	}
	if s.MaxSplitSizeMB != 0 {
		add(KeyMaxSplitSize, strconv.FormatUint(s.MaxSplitSizeMB, 10))
	}
	if s.MaxNonSplitRoundingMB != 0 {
		add(KeyMaxNonSplitRounding, strconv.FormatUint(s.MaxNonSplitRoundingMB, 10))
	}
	if s.RoundupPower2Divisions != (Divisions{}) {
		add(KeyRoundupPower2Divisions, s.RoundupPower2Divisions.String())
	}
	if s.GarbageCollectionThreshold != 0 {
		add(KeyGarbageCollectionThreshold, strconv.FormatFloat(s.GarbageCollectionThreshold, 'g', -1, 64))
	}
	for _, o := range s.Unmodelled {
		add(o.Key, o.Value)
	}
	return strings.Join(parts, ",")
}
