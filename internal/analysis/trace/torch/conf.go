// ParseConf: PYTORCH_CUDA_ALLOC_CONF's syntax, read as PyTorch reads it
// (ConfigTokenizer and AcceleratorAllocatorConfig::parseArgs in
// c10/core/AllocatorConfig.{h,cpp}, CUDAAllocatorConfig::parseArgs in
// c10/cuda/CUDAAllocatorConfig.cpp), so a line a user runs PyTorch with
// means the same thing here.
//
// Tokens: ',', ':', '[' and ']' are tokens of their own; spaces are
// dropped; any other run of characters is one token. The line is
// key ':' value { ',' key ':' value } [','], a value being one token or,
// for roundup_power2_divisions, '[' B ':' N { ',' B ':' N } ']'.
// A repeated key applies again (the last scalar wins; list entries add to
// the table as PyTorch's do).
//
// Every key PyTorch's CUDA allocator accepts is accepted: the modelled ones
// fill Settings' fields; the others do not change what the caching
// allocator reserves (pinned host memory, the lock around cudaMalloc,
// graph-capture stream reuse) and are kept in Settings.Unmodelled;
// backend:cudaMallocAsync replaces the caching allocator altogether and is
// refused with ErrConfUnmodelled.

package torch

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// ParseConf parses a PYTORCH_CUDA_ALLOC_CONF line. "" gives the defaults.
// The error is a *ConfError naming the key, wrapping ErrConfSyntax,
// ErrConfUnknownKey, ErrConfValue or ErrConfUnmodelled.
func ParseConf(line string) (Settings, error) {
	p := confParser{tok: tokenize(line)}
	var s Settings
	for p.i = 0; p.i < len(p.tok); p.i++ {
		key := p.tok[p.i]
		if err := p.expect(key, ":"); err != nil {
			return Settings{}, err
		}
		var err error
		switch key {
		case KeyExpandableSegments:
			s.ExpandableSegments, err = p.boolean(key)
		case KeyMaxSplitSize:
			s.MaxSplitSizeMB, err = p.splitMB(key)
		case KeyMaxNonSplitRounding:
			s.MaxNonSplitRoundingMB, err = p.splitMB(key)
		case KeyGarbageCollectionThreshold:
			s.GarbageCollectionThreshold, err = p.threshold(key)
		case KeyRoundupPower2Divisions:
			err = p.divisions(key, &s.RoundupPower2Divisions)
		case "backend":
			var v string
			if v, err = p.value(key); err == nil && v != "native" {
				if v == "cudaMallocAsync" || v == "hipMallocAsync" {
					return Settings{}, &ConfError{Key: key, Value: v, Err: ErrConfUnmodelled,
						Reason: "cudaMallocAsync is the driver's allocator, not the caching allocator this model replays; use backend:native or leave the key out"}
				}
				err = &ConfError{Key: key, Value: v, Err: ErrConfValue, Reason: "options are native and cudaMallocAsync"}
			}
			if err == nil {
				s.Unmodelled = append(s.Unmodelled, Option{key, v})
			}
		case "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
			"pinned_use_cuda_host_register", "pinned_use_hip_host_register",
			"pinned_use_background_threads", "graph_capture_record_stream_reuse":
			var b bool
			if b, err = p.boolean(key); err == nil {
				s.Unmodelled = append(s.Unmodelled, Option{key, pyBool(b)})
			}
		case "pinned_num_register_threads", "pinned_reserve_segment_size_mb":
			var n uint64
			if n, err = p.unsigned(key); err == nil {
				s.Unmodelled = append(s.Unmodelled, Option{key, strconv.FormatUint(n, 10)})
			}
		default:
			return Settings{}, &ConfError{Key: key, Err: ErrConfUnknownKey,
				Reason: "PyTorch does not know it either; the modelled keys are " + strings.Join([]string{
					KeyExpandableSegments, KeyMaxSplitSize, KeyMaxNonSplitRounding, KeyRoundupPower2Divisions, KeyGarbageCollectionThreshold}, ", ")}
		}
		if err != nil {
			return Settings{}, err
		}
		if p.i+1 < len(p.tok) {
			if err := p.expect(key, ","); err != nil {
				return Settings{}, err
			}
		}
	}
	return s, s.Validate()
}

// tokenize is ConfigTokenizer: separators alone, spaces dropped.
func tokenize(line string) []string {
	var tok []string
	var buf strings.Builder
	flush := func() {
		if buf.Len() > 0 {
			tok = append(tok, buf.String())
			buf.Reset()
		}
	}
	for _, r := range line {
		switch r {
		case ',', ':', '[', ']':
			flush()
			tok = append(tok, string(r))
		case ' ':
		default:
			buf.WriteRune(r)
		}
	}
	flush()
	return tok
}

// confParser walks the tokens; i is the token last consumed.
type confParser struct {
	tok []string
	i   int
}

// expect consumes the separator sep after key's current token.
func (p *confParser) expect(key, sep string) error {
	p.i++
	if p.i >= len(p.tok) || p.tok[p.i] != sep {
		got := "the end of the line"
		if p.i < len(p.tok) {
			got = strconv.Quote(p.tok[p.i])
		}
		return &ConfError{Key: key, Err: ErrConfSyntax, Reason: fmt.Sprintf("expected %q, found %s (the syntax is key:value,key:value)", sep, got)}
	}
	return nil
}

// value consumes one value token.
func (p *confParser) value(key string) (string, error) {
	p.i++
	if p.i >= len(p.tok) || strings.ContainsAny(p.tok[p.i], ",:[]") {
		return "", &ConfError{Key: key, Err: ErrConfSyntax, Reason: "expected a value after ':'"}
	}
	return p.tok[p.i], nil
}

func (p *confParser) boolean(key string) (bool, error) {
	v, err := p.value(key)
	if err != nil {
		return false, err
	}
	switch v {
	case "True":
		return true, nil
	case "False":
		return false, nil
	}
	return false, &ConfError{Key: key, Value: v, Err: ErrConfValue, Reason: "expected True or False (capitalised, as PyTorch spells them)"}
}

// pyBool spells b as PyTorch's conf does.
func pyBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func (p *confParser) unsigned(key string) (uint64, error) {
	v, err := p.value(key)
	if err != nil {
		return 0, err
	}
	n, perr := strconv.ParseUint(v, 10, 64)
	if perr != nil {
		return 0, &ConfError{Key: key, Value: v, Err: ErrConfValue, Reason: "expected a non-negative integer"}
	}
	return n, nil
}

// splitMB reads max_split_size_mb or max_non_split_rounding_mb: at least
// kLargeBuffer's 20 MiB, clamped to SIZE_MAX / kMB as PyTorch does.
func (p *confParser) splitMB(key string) (uint64, error) {
	n, err := p.unsigned(key)
	if err != nil {
		return 0, err
	}
	if n < MinSplitSizeMB {
		return 0, &ConfError{Key: key, Value: strconv.FormatUint(n, 10), Err: ErrConfValue,
			Reason: fmt.Sprintf("too small, must be >= %d (MiB, kLargeBuffer)", MinSplitSizeMB)}
	}
	return min(n, maxSplitMB), nil
}

func (p *confParser) threshold(key string) (float64, error) {
	v, err := p.value(key)
	if err != nil {
		return 0, err
	}
	f, perr := strconv.ParseFloat(v, 64)
	if perr != nil || !(f > 0 && f < 1) {
		return 0, &ConfError{Key: key, Value: v, Err: ErrConfValue, Reason: "must be a number in (0.0, 1.0)"}
	}
	return f, nil
}

// divisions reads a single value or a bracketed list into d, following
// parseRoundUpPower2Divisions's order of effects (roundup.go).
func (p *confParser) divisions(key string, d *Divisions) error {
	if p.i+1 < len(p.tok) && p.tok[p.i+1] == "[" {
		p.i++
		first, last := true, 0
		for {
			p.i++
			if p.i >= len(p.tok) {
				return &ConfError{Key: key, Err: ErrConfSyntax, Reason: "expected a closing ']'"}
			}
			if p.tok[p.i] == "]" {
				return nil
			}
			bound := p.tok[p.i]
			if err := p.expect(key, ":"); err != nil {
				return err
			}
			n, err := p.unsigned(key)
			if err != nil {
				return err
			}
			if n != 0 && n&(n-1) != 0 {
				return &ConfError{Key: key, Value: bound + ":" + strconv.FormatUint(n, 10), Err: ErrConfValue,
					Reason: "divisions must be a power of two, or 0 to disable rounding"}
			}
			if bound == ">" {
				for i := last + 1; i < DivisionIntervals; i++ {
					d[i] = n
				}
			} else {
				b, perr := strconv.ParseUint(bound, 10, 64)
				if perr != nil || b == 0 || b&(b-1) != 0 {
					return &ConfError{Key: key, Value: bound, Err: ErrConfValue,
						Reason: "an interval is its lower bound in MiB, a power of two (1, 2, 4, … 32768), or '>' for every larger one"}
				}
				idx := min(bits.Len64(b)-1, DivisionIntervals-1)
				if first {
					for i := range idx {
						d[i] = n
					}
					first = false
				}
				d[idx] = n
				last = idx
			}
			if p.i+1 < len(p.tok) && p.tok[p.i+1] != "]" {
				if err := p.expect(key, ","); err != nil {
					return err
				}
			}
		}
	}
	n, err := p.unsigned(key)
	if err != nil {
		return err
	}
	if n == 0 || n&(n-1) != 0 {
		return &ConfError{Key: key, Value: strconv.FormatUint(n, 10), Err: ErrConfValue,
			Reason: "divisions must be a power of two (the list form [B:0] disables rounding per interval)"}
	}
	*d = UniformDivisions(n)
	return nil
}
