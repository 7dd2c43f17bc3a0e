package shadowmodel

// Ropes: expected contents without copies.
//
// Every byte the model expects is a byte of one random string (base): writes
// write patterns (windows of base), ops write rotations of what they read.
// So a buffer's expected contents are a list of windows of immutable bytes,
// a snapshot for an op is a slice of that list, and a comparison walks it:
// no expected byte is ever copied (copies are what the race detector makes
// expensive). A window of base also fails loudly: a buffer holding another
// buffer's bytes, or its own bytes shifted, differs from it.

import (
	"bytes"
	"math/rand/v2"
)

// baseLen is the length of the string every pattern is cut from: large
// enough for the largest buffer the generator draws (Config.sizeCap).
const baseLen = 17 << 20

// base is the random byte string every pattern is a window of. Each run
// makes its own (the same bytes every time: a fixed seed), so nothing is
// shared between runs.
type base []byte

func newBase() base {
	r := rand.New(rand.NewPCG(0x5ba5e, 0x5ba5e))
	b := make([]byte, baseLen)
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// pat is the pattern of n bytes chosen by key.
func (b base) pat(key, n uint64) rope {
	if n == 0 {
		return nil
	}
	return rope{{src: b, off: mix(key) % (baseLen - n + 1), n: n}}
}

// mix is splitmix64: pattern offsets from keys, and the executor's
// choices from op indices.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// seg is n bytes of src from off; src is never empty.
type seg struct {
	src    []byte
	off, n uint64
}

func (g seg) bytes() []byte { return g.src[g.off : g.off+g.n] }

// follows reports whether h continues g in the same source.
func (g seg) follows(h seg) bool { return &g.src[0] == &h.src[0] && g.off+g.n == h.off }

// rope is a buffer's (or a range's) expected contents, in order.
type rope []seg

func (r rope) len() uint64 {
	var n uint64
	for _, g := range r {
		n += g.n
	}
	return n
}

// slice returns the contents of [lo, hi).
func (r rope) slice(lo, hi uint64) rope {
	var out rope
	var pos uint64
	for _, g := range r {
		end := pos + g.n
		if end > lo && pos < hi {
			a, b := max(lo, pos)-pos, min(hi, end)-pos
			out = append(out, seg{src: g.src, off: g.off + a, n: b - a})
		}
		if end >= hi {
			break
		}
		pos = end
	}
	return out
}

// concat returns r followed by o (r's backing array is not shared).
func (r rope) concat(o rope) rope {
	out := make(rope, len(r), len(r)+len(o))
	copy(out, r)
	for _, g := range o {
		if n := len(out); n > 0 && out[n-1].follows(g) {
			out[n-1].n += g.n
			continue
		}
		out = append(out, g)
	}
	return out
}

// replace returns r with [lo, lo+len(x)) replaced by x. A rope split into
// many runs is compacted into one private copy.
func (r rope) replace(lo uint64, x rope) rope {
	total := r.len()
	out := r.slice(0, lo).concat(x).concat(r.slice(lo+x.len(), total))
	if len(out) > 64 {
		out = rope{{src: out.materialize(), n: total}}
	}
	return out
}

// rotate returns r rotated left by k.
func (r rope) rotate(k uint64) rope {
	n := r.len()
	return r.slice(k, n).concat(r.slice(0, k))
}

func (r rope) equal(b []byte) bool {
	if uint64(len(b)) != r.len() {
		return false
	}
	var pos uint64
	for _, g := range r {
		if !bytes.Equal(b[pos:pos+g.n], g.bytes()) {
			return false
		}
		pos += g.n
	}
	return true
}

func (r rope) writeTo(dst []byte) {
	var pos uint64
	for _, g := range r {
		copy(dst[pos:], g.bytes())
		pos += g.n
	}
}

func (r rope) materialize() []byte {
	b := make([]byte, r.len())
	r.writeTo(b)
	return b
}
