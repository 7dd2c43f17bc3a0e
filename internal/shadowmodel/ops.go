package shadowmodel

// The operations of a script. Each is one line: the goroutine ("w2"), the
// operation's name, its positional arguments, then key=value arguments
// (text.go writes and parses them from the struct tags below). Buffers are
// named per goroutine: "a5" is the handle Alloc returned for allocation 5,
// "a5.2" its second Clone; graphs are "g1", "g2", … Every choice the model
// makes is in the line, so running a script needs no random numbers; what
// the goroutines' interleaving changes (out of memory, a relocation's
// timing) the executor judges from its own shadow, not from the script.

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpumem/gpumem"
)

// Script is a generated (or hand-written) run: the device, and each
// goroutine's operations in one list (a goroutine runs its own in order;
// the list interleaves them as the generator drew them).
type Script struct {
	Seed   uint64 // the seed it was generated from (0: written by hand)
	Steps  int    // the draws from the operation mix it was generated from (0: by hand)
	Config Config
	Known  []int // the known defects whose patterns the generator avoided (Gen.Known)
	Ops    []Op
}

// Op is one operation of one goroutine. Its index in Script.Ops is the
// op index a Violation names.
type Op struct {
	Worker int
	act    action
}

// String returns the op's line.
func (o Op) String() string { return fmt.Sprintf("w%d %s", o.Worker, formatAction(o.act)) }

// action is what an op does; run executes it on goroutine w, against the
// device and the shadow.
type action interface {
	name() string
	run(w *worker)
}

// actions lists every action, for the parser.
var actions = []action{
	allocOp{}, freeOp{}, cloneOp{}, writeOp{}, enqueueOp{}, delayOp{}, readOp{}, mapOp{},
	syncOp{}, streamCleanupOp{}, cleanupOp{}, defragmentOp{}, verifyOp{}, statsOp{},
	captureOp{}, launchOp{}, closeOp{}, racyCloseOp{},
	tooBigOp{}, outsideOp{}, staleOp{}, faultOp{}, mispredictOp{},
}

// Ref names a buffer handle of one goroutine: allocation Alloc's first
// handle ("a5", Clone 0) or its Clone-th clone ("a5.2").
type Ref struct{ Alloc, Clone int }

func (r Ref) MarshalText() ([]byte, error) {
	if r.Clone == 0 {
		return fmt.Appendf(nil, "a%d", r.Alloc), nil
	}
	return fmt.Appendf(nil, "a%d.%d", r.Alloc, r.Clone), nil
}

func (r *Ref) UnmarshalText(t []byte) error {
	s, ok := strings.CutPrefix(string(t), "a")
	if !ok {
		return fmt.Errorf("buffer %q: want a<n> or a<n>.<clone>", t)
	}
	a, c, _ := strings.Cut(s, ".")
	var err error
	if r.Alloc, err = strconv.Atoi(a); err != nil || r.Alloc < 1 {
		return fmt.Errorf("buffer %q: want a<n> or a<n>.<clone>, n ≥ 1", t)
	}
	r.Clone = 0
	if c != "" {
		if r.Clone, err = strconv.Atoi(c); err != nil || r.Clone < 1 {
			return fmt.Errorf("buffer %q: clone numbers start at 1", t)
		}
	}
	return nil
}

func (r Ref) String() string { b, _ := r.MarshalText(); return string(b) }

// GraphID names a graph of one goroutine ("g3").
type GraphID int

func (g GraphID) MarshalText() ([]byte, error) { return fmt.Appendf(nil, "g%d", int(g)), nil }

func (g *GraphID) UnmarshalText(t []byte) error {
	s, ok := strings.CutPrefix(string(t), "g")
	n, err := strconv.Atoi(s)
	if !ok || err != nil || n < 1 {
		return fmt.Errorf("graph %q: want g<n>, n ≥ 1", t)
	}
	*g = GraphID(n)
	return nil
}

// ---------------------------------------------------------------------------
// Buffers.

// allocOp allocates allocation A (handle A) of Size bytes on stream S, in
// a Persistent or Dedicated window when Mode says so.
type allocOp struct {
	A    Ref    `arg:"_"`
	S    int    `arg:"s"`
	Size uint64 `arg:"size"`
	Mode mode   `arg:"mode,omitempty"`
}

// freeOp frees handle Ref; the last handle frees the allocation.
type freeOp struct {
	Ref Ref `arg:"_"`
}

// cloneOp clones handle From into the new handle To.
type cloneOp struct {
	From Ref `arg:"_"`
	To   Ref `arg:"_"`
}

// writeOp writes the pattern Key (zeros on Sim) over [0, N) through Ref.
type writeOp struct {
	Ref Ref    `arg:"_"`
	N   uint64 `arg:"n"`
	Key uint64 `arg:"key,omitempty"`
}

// readOp reads Ref (or, with Map, maps it) and compares with the shadow.
type readOp struct {
	Ref Ref  `arg:"_"`
	Map bool `arg:"map"`
}

// mapOp maps Ref, compares, and with Cleanup runs a device cleanup while
// the mapping is held (the mapped page must not move) and compares again.
type mapOp struct {
	Ref     Ref  `arg:"_"`
	Cleanup bool `arg:"cleanup"`
}

// syncOp synchronizes stream S.
type syncOp struct {
	S int `arg:"s"`
}

// streamCleanupOp runs Stream.Cleanup on stream S, then verifies the
// goroutine's buffers if a relocation moved anything.
type streamCleanupOp struct {
	S int `arg:"s"`
}

// cleanupOp runs Device.Cleanup, then verifies as streamCleanupOp.
type cleanupOp struct{}

// defragmentOp runs Device.Defragment with these limits (0: none), checks
// its result, then verifies as streamCleanupOp.
type defragmentOp struct {
	Moves int    `arg:"moves,omitempty"`
	Bytes uint64 `arg:"bytes,omitempty"`
}

// verifyOp verifies every buffer of the goroutine when a relocation moved
// something since its last check (the generator puts one every 500 steps).
type verifyOp struct{}

// statsOp checks Stats (and with Report, Report) for sanity.
type statsOp struct {
	Report bool `arg:"report"`
}

// mispredictOp is the model's self-test, never generated: it changes the
// shadow's expectation of byte Off of allocation A (not the buffer), so
// the next comparison of that byte must report a divergence.
type mispredictOp struct {
	A   Ref    `arg:"_"`
	Off uint64 `arg:"off"`
}

// ---------------------------------------------------------------------------
// Ops on streams.

// enqueueOp enqueues an op of shape Shape over Uses on stream S. xform
// reads Uses[0] and writes every other use with it rotated left by
// Rots[i-1]; inplace rotates Uses[0] by Rots[0]; fill writes the pattern
// Key; verify only reads. Fail makes the op fail (its outputs get junk and
// a failure mark); Calls > 0 makes it call the device from inside (stats,
// a scratch allocation of Calls bytes, a Synchronize that must be refused).
type enqueueOp struct {
	S     int      `arg:"s"`
	Shape shape    `arg:"shape"`
	Fail  failMode `arg:"fail,omitempty"`
	Calls uint64   `arg:"calls,omitempty"`
	Uses  uses     `arg:"uses"`
	Rots  u64s     `arg:"rot,omitempty"`
	Key   uint64   `arg:"key,omitempty"`
}

// delayOp enqueues an op that sleeps D on stream S: later work on the
// stream stays pending a while, so frees, cleanups and graph closes
// happen under it.
type delayOp struct {
	S int           `arg:"s"`
	D time.Duration `arg:"d"`
}

type shape int

const (
	xform shape = iota
	inplace
	fill
	verify
)

var shapeNames = []string{xform: "xform", inplace: "inplace", fill: "fill", verify: "verify"}

func (s shape) MarshalText() ([]byte, error)  { return marshalEnum(shapeNames, int(s)) }
func (s *shape) UnmarshalText(t []byte) error { return unmarshalEnum(shapeNames, (*int)(s), t) }

type failMode int

const (
	succeed failMode = iota
	failError
	failPanic
)

var failNames = []string{succeed: "none", failError: "error", failPanic: "panic"}

func (f failMode) MarshalText() ([]byte, error)  { return marshalEnum(failNames, int(f)) }
func (f *failMode) UnmarshalText(t []byte) error { return unmarshalEnum(failNames, (*int)(f), t) }

// use is one gpumem.Use of an op: "R:a3[0+4096)", with "*" after it when
// the op passes Size 0 (the rest of the buffer).
type use struct {
	Access gpumem.Access
	Ref    Ref
	Off, N uint64
	Rest   bool
}

func (u use) reads() bool  { return u.Access != gpumem.Write }
func (u use) writes() bool { return u.Access != gpumem.Read }

var accessNames = []string{gpumem.Read: "R", gpumem.Write: "W", gpumem.ReadWrite: "RW"}

func (u use) String() string {
	s := fmt.Sprintf("%s:%s[%d+%d)", accessNames[u.Access], u.Ref, u.Off, u.N)
	if u.Rest {
		s += "*"
	}
	return s
}

type uses []use

func (us uses) MarshalText() ([]byte, error) {
	parts := make([]string, len(us))
	for i, u := range us {
		parts[i] = u.String()
	}
	return []byte(strings.Join(parts, ",")), nil
}

func (us *uses) UnmarshalText(t []byte) error {
	*us = nil
	for _, f := range strings.Split(string(t), ",") {
		var u use
		acc, rest, ok := strings.Cut(f, ":")
		var a int
		if ok {
			ok = unmarshalEnum(accessNames, &a, []byte(acc)) == nil
		}
		ref, rng, ok2 := strings.Cut(rest, "[")
		if !ok || !ok2 {
			return fmt.Errorf("use %q: want R|W|RW:a<n>[off+n)", f)
		}
		u.Access = gpumem.Access(a)
		if err := u.Ref.UnmarshalText([]byte(ref)); err != nil {
			return err
		}
		rng, u.Rest = strings.CutSuffix(rng, "*")
		rng, ok = strings.CutSuffix(rng, ")")
		off, n, ok2 := strings.Cut(rng, "+")
		var err1, err2 error
		u.Off, err1 = strconv.ParseUint(off, 10, 64)
		u.N, err2 = strconv.ParseUint(n, 10, 64)
		if !ok || !ok2 || err1 != nil || err2 != nil {
			return fmt.Errorf("use %q: want R|W|RW:a<n>[off+n)", f)
		}
		*us = append(*us, u)
	}
	return nil
}

// u64s is a comma-separated list of numbers.
type u64s []uint64

func (l u64s) MarshalText() ([]byte, error) {
	parts := make([]string, len(l))
	for i, v := range l {
		parts[i] = strconv.FormatUint(v, 10)
	}
	return []byte(strings.Join(parts, ",")), nil
}

func (l *u64s) UnmarshalText(t []byte) error {
	*l = nil
	for _, f := range strings.Split(string(t), ",") {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return fmt.Errorf("number list %q: %w", t, err)
		}
		*l = append(*l, v)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Captures and graphs.

// captureOp captures graph G on stream S over allocations A, B (N bytes
// each, N = A's size) and C: per run r the graph fills A with pattern
// (Seed, r), writes B = A rotated left by Rot, and fills C with pattern
// (Seed, r, c) — or fails C on runs that are multiples of Every. With
// Scratch > 0 the capture function allocates scratch memory (freed after
// the rotation, allocated again for C's op).
type captureOp struct {
	G       GraphID `arg:"_"`
	S       int     `arg:"s"`
	A       Ref     `arg:"a"`
	B       Ref     `arg:"b"`
	C       Ref     `arg:"c"`
	Seed    uint64  `arg:"seed"`
	Rot     uint64  `arg:"rot"`
	Every   int     `arg:"every,omitempty"`
	Scratch uint64  `arg:"scratch,omitempty"`
}

// launchOp launches graph G.
type launchOp struct {
	G GraphID `arg:"_"`
}

// closeOp closes graph G; with Relaunch it launches it again, which must
// fail with ErrClosed.
type closeOp struct {
	G        GraphID `arg:"_"`
	Relaunch bool    `arg:"relaunch"`
}

// racyCloseOp closes graph G while another goroutine, after Pause,
// enqueues a Hold-long op on its stream and launches it: the launch must
// either be refused (ErrClosed) or not outlive Close (defect 1).
type racyCloseOp struct {
	G     GraphID       `arg:"_"`
	Pause time.Duration `arg:"pause"`
	Hold  time.Duration `arg:"hold"`
}

// ---------------------------------------------------------------------------
// Misuse and faults.

// tooBigOp allocates Size bytes (above the max page) on stream S: a
// dedicated allocation, or ErrOutOfMemory.
type tooBigOp struct {
	S    int    `arg:"s"`
	Size uint64 `arg:"size"`
}

// outsideOp enqueues on stream S an op with a read of N bytes just past
// the end of In (after a valid write of Out, when set): ErrInvalidUse,
// nothing runs, nothing is marked.
type outsideOp struct {
	In  Ref    `arg:"_"`
	S   int    `arg:"s"`
	N   uint64 `arg:"n"`
	Out Ref    `arg:"out,omitempty"`
}

// staleOp calls Call on the freed handle Ref (Write with N bytes, Enqueue
// on stream S): ErrAlreadyFreed, or nil from Clone.
type staleOp struct {
	Ref  Ref       `arg:"_"`
	Call staleCall `arg:"call"`
	N    uint64    `arg:"n,omitempty"`
	S    int       `arg:"s,omitempty"`
}

type staleCall int

const (
	staleRead staleCall = iota
	staleWrite
	staleFree
	staleClone
	staleEnqueue
)

var staleNames = []string{staleRead: "read", staleWrite: "write", staleFree: "free", staleClone: "clone", staleEnqueue: "enqueue"}

func (c staleCall) MarshalText() ([]byte, error)  { return marshalEnum(staleNames, int(c)) }
func (c *staleCall) UnmarshalText(t []byte) error { return unmarshalEnum(staleNames, (*int)(c), t) }

// faultOp arms a fault on the Storage-th stream storage (modulo their
// number): refuse the next N allocations or granule maps, refuse
// relocation copy N or copy-queue wait N, refuse allocations above the
// bytes allocated now plus Above, or turn that threshold off.
type faultOp struct {
	Storage int       `arg:"storage"`
	Kind    faultKind `arg:"kind"`
	N       int       `arg:"n,omitempty"`
	Above   uint64    `arg:"above,omitempty"`
}

type faultKind int

const (
	refuseAllocs faultKind = iota
	refuseMaps
	refuseCopy
	refuseAbove
	thresholdOff
	refuseWait
)

var faultNames = []string{refuseAllocs: "allocs", refuseMaps: "maps", refuseCopy: "copy", refuseAbove: "above",
	thresholdOff: "threshold-off", refuseWait: "wait"}

func (k faultKind) MarshalText() ([]byte, error)  { return marshalEnum(faultNames, int(k)) }
func (k *faultKind) UnmarshalText(t []byte) error { return unmarshalEnum(faultNames, (*int)(k), t) }

func (allocOp) name() string         { return "alloc" }
func (freeOp) name() string          { return "free" }
func (cloneOp) name() string         { return "clone" }
func (writeOp) name() string         { return "write" }
func (readOp) name() string          { return "read" }
func (mapOp) name() string           { return "map" }
func (syncOp) name() string          { return "sync" }
func (streamCleanupOp) name() string { return "stream-cleanup" }
func (cleanupOp) name() string       { return "cleanup" }
func (defragmentOp) name() string    { return "defragment" }
func (verifyOp) name() string        { return "verify-moved" }
func (statsOp) name() string         { return "stats" }
func (mispredictOp) name() string    { return "mispredict" }
func (enqueueOp) name() string       { return "enqueue" }
func (delayOp) name() string         { return "delay" }
func (captureOp) name() string       { return "capture" }
func (launchOp) name() string        { return "launch" }
func (closeOp) name() string         { return "close" }
func (racyCloseOp) name() string     { return "racy-close" }
func (tooBigOp) name() string        { return "too-big" }
func (outsideOp) name() string       { return "outside" }
func (staleOp) name() string         { return "stale" }
func (faultOp) name() string         { return "fault" }
