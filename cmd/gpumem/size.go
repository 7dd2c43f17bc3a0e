package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
)

// sizeUnits are the units a size may carry, matched without regard to
// case: decimal kB, MB, GB, TB (10³ … 10¹², as disk and GPU vendors
// quote them, also K, M, G, T) and binary KiB, MiB, GiB, TiB (2¹⁰ … 2⁴⁰,
// also Ki, Mi, Gi, Ti), or B.
var sizeUnits = []struct {
	suffix string
	mul    float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"ki", 1 << 10}, {"mi", 1 << 20}, {"gi", 1 << 30}, {"ti", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"t", 1e12},
	{"b", 1},
}

// sizeHelp is how the flags' help describes a size.
const sizeHelp = "decimal kB/MB/GB/TB (80GB = 80×10⁹ B) or binary KiB/MiB/GiB/TiB (80GiB = 80×2³⁰ B), any case"

// splitUnit splits a number from its unit suffix (lower-cased).
func splitUnit(s string) (number, unit string) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') && t[i-1] != '.' {
		i--
	}
	return strings.TrimSpace(t[:i]), strings.ToLower(strings.TrimSpace(t[i:]))
}

// parseSize reads a byte count: a finite, non-negative number with an
// optional unit of sizeUnits, below 2^63 bytes once multiplied.
func parseSize(s string) (uint64, error) {
	num, unit := splitUnit(s)
	mul, ok := 1.0, unit == ""
	for _, u := range sizeUnits {
		if unit == u.suffix {
			mul, ok = u.mul, true
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (%s)", s, sizeHelp)
	}
	v := math.Round(f * mul)
	if v >= 1<<63 {
		return 0, fmt.Errorf("size %q is too large (at most 2^63 bytes)", s)
	}
	return uint64(v), nil
}

// parseRate reads a bandwidth in bytes per second: a number with an
// optional size unit and an optional "/s" ("2TB/s", "900GB/s", "1.5TiB/s",
// "2e12"); it must be finite and at least 1 B/s.
func parseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	if l := strings.ToLower(t); strings.HasSuffix(l, "/s") {
		t = t[:len(t)-2]
	}
	num, unit := t, ""
	if f, err := strconv.ParseFloat(strings.TrimSpace(t), 64); err == nil {
		num = strconv.FormatFloat(f, 'g', -1, 64)
	} else {
		num, unit = splitUnit(t)
	}
	mul, ok := 1.0, unit == ""
	for _, u := range sizeUnits {
		if unit == u.suffix {
			mul, ok = u.mul, true
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || math.IsNaN(f) || math.IsInf(f*mul, 0) || f*mul < 1 {
		return 0, fmt.Errorf("bandwidth %q: want a finite rate of at least 1 B/s, such as 2TB/s, 900GB/s or 2e12", s)
	}
	return f * mul, nil
}

// sizeFlag is a flag.Value holding a size; set tells an explicit value
// from the default, text is the value as the user gave it.
type sizeFlag struct {
	v    uint64
	set  bool
	text string
}

func (s *sizeFlag) String() string {
	for _, u := range []struct {
		name string
		mul  uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if s.v >= u.mul && s.v%u.mul == 0 {
			return strconv.FormatUint(s.v/u.mul, 10) + u.name
		}
	}
	return strconv.FormatUint(s.v, 10)
}
func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	s.v, s.set, s.text = n, true, strings.TrimSpace(v)
	return nil
}

// decimalNote echoes a size given in a decimal unit with the binary value
// it was read as, the way the reports print sizes ("-capacity 80GB =
// 74.51 GiB"), and, for a -capacity in GB or TB, what a card sold as that
// size has: an "80 GB" card has 80 GiB (nvidia-smi shows 81920 MiB), so
// 80GB is most likely a slip for 80GiB. "" for a size in binary units or
// bytes, or one not given.
func decimalNote(name string, s sizeFlag) string {
	if !s.set {
		return ""
	}
	num, unit := splitUnit(s.text)
	binary := map[string]string{"k": "KiB", "kb": "KiB", "m": "MiB", "mb": "MiB", "g": "GiB", "gb": "GiB", "t": "TiB", "tb": "TiB"}[unit]
	if binary == "" {
		return ""
	}
	note := fmt.Sprintf("%s %s = %s", name, s.text, units.Bytes(s.v))
	if name != "-capacity" || (binary != "GiB" && binary != "TiB") {
		return note + fmt.Sprintf(" (decimal units; %s%s is the binary size)", num, binary)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f <= 0 {
		return note
	}
	mib := f * 1024
	if binary == "TiB" {
		mib *= 1024
	}
	decimal := strings.ToUpper(unit[:1]) + "B"
	return note + fmt.Sprintf("; %s %s %s card has %s %s (nvidia-smi shows %s MiB): did you mean %s%s?",
		article(num), num, decimal, num, binary, strconv.FormatFloat(math.Round(mib), 'f', -1, 64), num, binary)
}

// article is "a" or "an" before a number said aloud: "an" before eight,
// eighty, eight hundred…, eleven and eighteen (and their thousands).
func article(num string) string {
	whole, _, _ := strings.Cut(num, ".")
	whole = strings.TrimLeft(whole, "0")
	switch {
	case strings.HasPrefix(whole, "8"):
		return "an"
	case len(whole)%3 == 2 && (strings.HasPrefix(whole, "11") || strings.HasPrefix(whole, "18")):
		return "an"
	}
	return "a"
}

// rateFlag is a flag.Value holding a bandwidth in bytes per second.
type rateFlag struct{ v float64 }

func (r *rateFlag) String() string {
	if r.v >= 1e12 && math.Mod(r.v, 1e9) == 0 {
		return strconv.FormatFloat(r.v/1e12, 'g', -1, 64) + "TB/s"
	}
	return strconv.FormatFloat(r.v, 'g', -1, 64)
}
func (r *rateFlag) Set(v string) error {
	f, err := parseRate(v)
	if err != nil {
		return err
	}
	r.v = f
	return nil
}
