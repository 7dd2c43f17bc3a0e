// Failure bookkeeping (design §11): which failure left which bytes unwritten,
// and what a read of those bytes reports.
//
// A failure belongs to the memory it left unwritten. The device-wide
// ErrorGraph maps a FailureID to a node {err, tags, skip records, skipped
// total, carriers}. The bytes themselves are marked by a Taint per slice
// (taint.go); a buffer whose reservation failed before it was ever placed has
// no slice, so the graph keeps its failure by buffer ID instead.
//
// Carriers. A node's carrier count is the number of Taints that hold at least
// one range of it plus the number of unplaced buffers that carry it:
//
//	(E1) carriers(F) = |{t : t holds a range of F}| + |{b : unplaced b carries F}|
//	(E2) a node lives while carriers(F) > 0; when a Mark, Release, Clear or
//	     ReleaseUnplaced takes it to 0 the node is dropped at once.
//	(E3) a node made by Fail starts with 0 carriers and lives until the next
//	     Prune unless something takes it first (the caller marks bytes
//	     between Fail and Prune, under the device lock).
//	(E4) FailureIDs start at 1, increase and are never reused within a graph,
//	     so a dropped ID can never resolve to a newer failure.
//
// Counting carriers per Taint rather than per byte keeps the count exact at
// O(1) memory per node: a Taint decides locally whether it still holds the
// failure after an edit (it scans its own few ranges) and tells the graph only
// when that answer changes. Rejected: a count of marked bytes per node, which
// would need every Taint edit to compute overlap sizes and could not tell an
// unplaced buffer (no bytes yet) from nothing.
//
// Skip records. An op skipped because an input carried F records (op, input
// buffer, outputs) on F. The newest skipRecordsKept are kept, older ones only
// counted: a long chain of skipped work must not grow memory without bound.
// 16 is enough to show how the failure travelled through a step of a model
// (a handful of layers) while staying a few hundred bytes per node.

package handle

import (
	"errors"
	"fmt"
	"strings"
)

// FailureID identifies one failure in an ErrorGraph: non-zero, monotonic per
// graph, never reused (E4).
type FailureID uint64

// ErrUnwritten is wrapped by the error a Read or Map returns when the bytes
// it would read were left unwritten by a failure. The same error also wraps
// the root failure's error, so errors.Is reaches both.
var ErrUnwritten = errors.New("handle: bytes unwritten because an earlier operation failed")

// skipRecordsKept is how many skip records a node keeps (the newest); older
// ones are counted only.
const skipRecordsKept = 16

// SkipRecord says an op was skipped because its input carried a failure; its
// outputs now carry the same failure. Input and Outputs are allocation IDs
// (buffers).
type SkipRecord struct {
	Op      string
	Input   ID
	Outputs []ID
}

// node is one failure: its error, tags, the newest skip records (oldest
// first) and the bookkeeping of E1–E3.
type node struct {
	err      error
	tags     []string
	skips    []SkipRecord // newest skipRecordsKept, oldest first
	skipped  int          // every skip record ever added
	carriers int          // E1
}

// ErrorGraph is the device-wide map from failures to the bytes they left
// unwritten. The zero value is ready to use; NewErrorGraph is its explicit
// constructor.
//
// ErrorGraph is not safe for concurrent use: the device lock serialises it,
// together with every Taint that reports to it.
type ErrorGraph struct {
	last     FailureID           // the newest FailureID handed out (E4)
	nodes    map[FailureID]*node // live failures
	unplaced map[ID]FailureID    // buffers that failed before placement
}

// NewErrorGraph returns an empty graph.
func NewErrorGraph() *ErrorGraph {
	return &ErrorGraph{nodes: make(map[FailureID]*node), unplaced: make(map[ID]FailureID)}
}

// Fail records a new failure with err (which must not be nil) and optional
// tags (the op, the stream, the phase: they appear in reports). The node has
// no carriers yet: mark the bytes the failure left unwritten before the next
// Prune, which drops it otherwise (E3).
func (g *ErrorGraph) Fail(err error, tags ...string) FailureID {
	if err == nil {
		panic("handle: ErrorGraph.Fail with a nil error")
	}
	if g.nodes == nil {
		g.nodes = make(map[FailureID]*node)
	}
	g.last++
	g.nodes[g.last] = &node{err: err, tags: append([]string(nil), tags...)}
	return g.last
}

// Err returns the failure's current error, and false when the failure is not
// live (never made, or dropped because nothing carries it).
func (g *ErrorGraph) Err(id FailureID) (error, bool) {
	n, ok := g.nodes[id]
	if !ok {
		return nil, false
	}
	return n.err, true
}

// Replace swaps the failure's error for err (which must not be nil), for
// example when a later, more precise diagnosis arrives. Every carrier stays
// on the node and now reports err. Replacing a failure that is not live does
// nothing.
func (g *ErrorGraph) Replace(id FailureID, err error) {
	if err == nil {
		panic("handle: ErrorGraph.Replace with a nil error")
	}
	if n, ok := g.nodes[id]; ok {
		n.err = err
	}
}

// Skip adds a skip record to the failure: rec.Op was skipped because
// rec.Input carried it. The newest 16 records are kept and every record is
// counted. The record's Outputs are copied. Skipping on a failure that is not
// live does nothing.
func (g *ErrorGraph) Skip(id FailureID, rec SkipRecord) {
	n, ok := g.nodes[id]
	if !ok {
		return
	}
	rec.Outputs = append([]ID(nil), rec.Outputs...)
	if len(n.skips) == skipRecordsKept {
		copy(n.skips, n.skips[1:])
		n.skips[len(n.skips)-1] = rec
	} else {
		n.skips = append(n.skips, rec)
	}
	n.skipped++
}

// Carriers returns how many Taints and unplaced buffers carry the failure
// (E1); 0 when it is not live.
func (g *ErrorGraph) Carriers(id FailureID) int {
	if n, ok := g.nodes[id]; ok {
		return n.carriers
	}
	return 0
}

// Live returns the number of live failures.
func (g *ErrorGraph) Live() int { return len(g.nodes) }

// Prune drops every failure that nothing carries, in particular those made by
// Fail that never tainted anything (E3). A carried failure is left alone.
func (g *ErrorGraph) Prune() {
	for id, n := range g.nodes {
		if n.carriers == 0 {
			delete(g.nodes, id)
		}
	}
}

// MarkUnplaced records that buffer, which was created before placement and
// whose reservation failed, carries failure f as a whole until it is freed
// (ReleaseUnplaced). A buffer carries one failure: marking it again with
// another failure moves it from the old one (which is dropped if that was its
// last carrier). f must be live; anything else is an internal bug and panics.
func (g *ErrorGraph) MarkUnplaced(buffer ID, f FailureID) {
	old, had := g.unplaced[buffer]
	if had && old == f {
		return
	}
	g.carry(f)
	if g.unplaced == nil {
		g.unplaced = make(map[ID]FailureID)
	}
	g.unplaced[buffer] = f
	if had {
		g.drop(old)
	}
}

// UnplacedFailure returns the failure an unplaced buffer carries.
func (g *ErrorGraph) UnplacedFailure(buffer ID) (FailureID, bool) {
	f, ok := g.unplaced[buffer]
	return f, ok
}

// ReleaseUnplaced forgets the buffer's failure, when the buffer is freed or
// placed; the failure is dropped if that was its last carrier. A buffer that
// carries no failure is ignored, so callers may call it for every buffer they
// free.
func (g *ErrorGraph) ReleaseUnplaced(buffer ID) {
	f, ok := g.unplaced[buffer]
	if !ok {
		return
	}
	delete(g.unplaced, buffer)
	g.drop(f)
}

// carry adds a carrier to f. Carrying a failure that is not live means a
// Taint or buffer outlived the bookkeeping: an internal bug.
func (g *ErrorGraph) carry(f FailureID) {
	if g == nil {
		panic(fmt.Sprintf("handle: failure %d marked without an ErrorGraph", f))
	}
	n, ok := g.nodes[f]
	if !ok {
		panic(fmt.Sprintf("handle: failure %d marked but not live in the error graph", f))
	}
	n.carriers++
}

// drop removes a carrier from f and drops the node when it was the last
// (E2). A count that would go below zero is an internal bug.
func (g *ErrorGraph) drop(f FailureID) {
	if g == nil {
		panic(fmt.Sprintf("handle: failure %d released without an ErrorGraph", f))
	}
	n, ok := g.nodes[f]
	if !ok || n.carriers <= 0 {
		panic(fmt.Sprintf("handle: failure %d released more often than it was carried", f))
	}
	n.carriers--
	if n.carriers == 0 {
		delete(g.nodes, f)
	}
}

// Report returns the error for a read of buffer read whose bytes carry
// failure id: an *UnwrittenError, which wraps both ErrUnwritten and the root
// failure's current error. Its message walks the skip chain from read back to
// the root, newest hop first, root always included with its FailureID, and
// says how many older skip records were dropped beyond the 16 kept.
//
// The chain is followed through the kept records from newest to oldest: a
// record whose Outputs hold the buffer reached so far is a hop, and its Input
// is the next buffer to look for. Each hop is strictly older than the one
// before, so the walk ends even when buffers are reused.
func (g *ErrorGraph) Report(id FailureID, read ID) error {
	e := &UnwrittenError{Failure: id, Buffer: read}
	n, ok := g.nodes[id]
	if !ok {
		return e
	}
	e.Root = n.err
	e.Tags = append([]string(nil), n.tags...)
	e.Dropped = n.skipped - len(n.skips)
	cur := read
	for i := len(n.skips) - 1; i >= 0; i-- {
		rec := n.skips[i]
		for _, out := range rec.Outputs {
			if out == cur {
				rec.Outputs = append([]ID(nil), rec.Outputs...)
				e.Hops = append(e.Hops, rec)
				cur = rec.Input
				break
			}
		}
	}
	return e
}

// UnwrittenError is what a read of bytes a failure left unwritten returns
// (from ErrorGraph.Report). It unwraps to ErrUnwritten and to Root, so
// errors.Is matches both; reach its fields with errors.As.
type UnwrittenError struct {
	Failure FailureID    // the failure the read bytes carry
	Buffer  ID           // the buffer read
	Root    error        // the failure's error; nil if the failure was no longer live
	Tags    []string     // the failure's tags
	Hops    []SkipRecord // the skip chain from Buffer back to the root, newest first
	Dropped int          // older skip records dropped beyond the 16 kept
}

// Error walks the chain: the buffer read, each skipped op newest first, then
// the root failure with its ID, tags and error, then the dropped count.
func (e *UnwrittenError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: read of buffer %d", ErrUnwritten, e.Buffer)
	for _, h := range e.Hops {
		fmt.Fprintf(&b, " <- op %q skipped (input buffer %d)", h.Op, h.Input)
	}
	fmt.Fprintf(&b, " <- failure %d", e.Failure)
	if len(e.Tags) > 0 {
		fmt.Fprintf(&b, " [%s]", strings.Join(e.Tags, ", "))
	}
	if e.Root != nil {
		fmt.Fprintf(&b, ": %v", e.Root)
	} else {
		b.WriteString(": no longer recorded")
	}
	if e.Dropped > 0 {
		fmt.Fprintf(&b, " (%d older skip records dropped)", e.Dropped)
	}
	return b.String()
}

// Unwrap returns ErrUnwritten and, when known, the root failure's error.
func (e *UnwrittenError) Unwrap() []error {
	if e.Root == nil {
		return []error{ErrUnwritten}
	}
	return []error{ErrUnwritten, e.Root}
}
