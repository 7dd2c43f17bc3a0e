// Relocation values and the copy step (design §7.1, §7.3, §7.5); the protocol
// as a whole is described in doc.go.
//
// A Relocation is used once. Its life is a small state machine:
//
//	pending ──Copy ok──────────────▶ landed    (clones belong to the Landed)
//	pending ──Abandon / Copy err───▶ abandoned (clones released)
//	pending ──Copy, wait failed────▶ leaked    (clones dropped unreleased, R7)
//
// Abandon outside pending does nothing, so a caller may abandon on every
// error path without tracking which path already did; a second Copy is an
// internal bug and panics.

package relocation

import (
	"fmt"
	"iter"
	"slices"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/storage"
)

// StorageCopy is one copy of a relocation: Source and Target are windows of
// equal size on distinct pages (distinct storage allocations). The size is
// the allocation's requested size, never the padded one, so a backend that
// rounds copies up must stay inside both slices.
type StorageCopy struct {
	Source, Target storage.Region
}

// Move is one allocation's planned move: a clone of the allocation's handle
// (sharing every owner's descriptor, so the commit re-points them all), the
// handle of the target slice reserved for it, and the copy between them.
// A Move owns both handles until its Relocation is abandoned or committed.
type Move struct {
	allocation *handle.Handle
	target     *handle.Handle
	copy       StorageCopy
}

// NewMove returns a move that takes ownership of allocation (a clone of the
// allocation's handle) and target (the reserved target handle). The caller
// must already have cloned both; the move releases them when abandoned and
// pool.Arena.Commit releases them when committed.
//
// A nil handle, one handle used for both sides, unequal copy sizes, or a copy
// within one page breaks R5 and panics: the planner made them, not the user.
func NewMove(allocation, target *handle.Handle, c StorageCopy) Move {
	switch {
	case allocation == nil || target == nil:
		panic("relocation: NewMove with a nil handle")
	case allocation.Descriptor() == target.Descriptor():
		panic(fmt.Sprintf("relocation: NewMove of allocation %d onto itself", allocation.ID()))
	case c.Source.Size != c.Target.Size:
		panic(fmt.Sprintf("relocation: NewMove of allocation %d copies %d bytes into a %d-byte target",
			allocation.ID(), c.Source.Size, c.Target.Size))
	case c.Source.ID == c.Target.ID:
		panic(fmt.Sprintf("relocation: NewMove of allocation %d within one page (storage allocation %d)",
			allocation.ID(), c.Source.ID))
	}
	return Move{allocation: allocation, target: target, copy: c}
}

// Allocation returns the move's clone of the allocation's handle. Its
// location is the source until the commit rewrites it.
func (m Move) Allocation() *handle.Handle { return m.allocation }

// Target returns the handle of the target slice reserved for the move.
func (m Move) Target() *handle.Handle { return m.target }

// Copy returns the bytes the move copies.
func (m Move) Copy() StorageCopy { return m.copy }

// release drops both handles of the move.
func (m Move) release() {
	m.target.Release()
	m.allocation.Release()
}

// TargetRoom says where a plan may carve targets.
type TargetRoom uint8

const (
	// Held: targets only in room the current pages already have. Memory is
	// short, and a new page would cost more than the relocation frees.
	Held TargetRoom = iota
	// MayAllocate: targets may take new pages of the current size when held
	// room runs out. Memory is not short, and emptying every outdated page is
	// worth a page.
	MayAllocate
)

func (r TargetRoom) String() string {
	switch r {
	case Held:
		return "Held"
	case MayAllocate:
		return "MayAllocate"
	}
	return fmt.Sprintf("TargetRoom(%d)", uint8(r))
}

// phase is where a Relocation stands in its single use (see the diagram at
// the top of this file).
type phase uint8

const (
	pending phase = iota
	landed
	abandoned
	leaked
)

// Relocation is a plan: moves in plan order, each owning two handles. It is
// used once: Copy it, or Abandon it.
type Relocation struct {
	moves []Move
	phase phase
}

// New returns a relocation of moves, in plan order, taking ownership of every
// move's handles and of the slice itself: the caller must not use moves
// afterwards (a plan of 10^5 moves is not copied to be handed over). An
// empty relocation is valid (there was nothing to move). A zero Move (not
// from NewMove) is an internal bug and panics.
func New(moves []Move) *Relocation {
	for i, m := range moves {
		if m.allocation == nil || m.target == nil {
			panic(fmt.Sprintf("relocation: move %d of %d was not made by NewMove", i, len(moves)))
		}
	}
	return &Relocation{moves: moves}
}

// Len returns the number of moves.
func (r *Relocation) Len() int { return len(r.moves) }

// IsEmpty reports whether the plan moves nothing.
func (r *Relocation) IsEmpty() bool { return len(r.moves) == 0 }

// Moves returns the moves in plan order. The slice is a copy; the handles are
// the relocation's and must not be released by the caller.
func (r *Relocation) Moves() []Move { return slices.Clone(r.moves) }

// Bytes returns the bytes the plan copies: the sum of the requested sizes.
func (r *Relocation) Bytes() uint64 { return copiedBytes(r.moves) }

// Leaked reports whether Copy failed in a way that left copies possibly in
// flight, so the relocation dropped its handles unreleased (R7): the sources
// and targets stay non-free forever. The caller counts it as Leaked rather
// than Abandoned.
func (r *Relocation) Leaked() bool { return r.phase == leaked }

// Abandon releases every target and allocation clone: targets become free,
// every allocation keeps its location and bytes. It does nothing once the
// relocation was copied, abandoned or leaked, so every error path may call
// it.
func (r *Relocation) Abandon() {
	if r.phase != pending {
		return
	}
	r.phase = abandoned
	for _, m := range r.moves {
		m.release()
	}
}

// Copy copies every move's bytes through q, in exactly this order (design
// §7.3):
//
//  1. q.WaitDevice(): nothing moves until every stream's work is done (R1).
//     On error the relocation is abandoned (nothing was enqueued) and the
//     error returned.
//  2. q.Copy for each move in plan order, stopping at the first refusal.
//  3. q.WaitCopies(), always, even after a refusal: abandoning frees the
//     targets, and a copy still writing into a freed target would corrupt
//     its next owner. If the wait fails, nobody knows whether the copies
//     landed: on a poisoned device (storage.ErrDevicePoisoned, from the wait
//     or the refusal) nothing will use the memory again and the relocation is
//     abandoned; otherwise it leaks (R7, see Leaked). Copy then returns the
//     refusal if any, else the wait error; both stay reachable by errors.Is.
//  4. A refusal with a successful wait: every enqueued copy has landed, so
//     the relocation is abandoned and the refusal returned.
//  5. Otherwise every byte has landed: Copy returns the Landed that
//     pool.Arena.Commit takes, and the handles now belong to it.
//
// Copy on a relocation already copied, abandoned or leaked panics: a
// relocation is used once.
func (r *Relocation) Copy(st storage.Storage, q CopyQueue) (*Landed, error) {
	if r.phase != pending {
		panic("relocation: Copy of a relocation already used (copied, abandoned or leaked)")
	}
	if err := q.WaitDevice(); err != nil {
		r.Abandon()
		return nil, fmt.Errorf("relocation: waiting for the device before the first of %d copies: %w", len(r.moves), err)
	}
	var refused error
	for i, m := range r.moves {
		if err := q.Copy(st, m.copy); err != nil {
			refused = fmt.Errorf("relocation: copy %d of %d (allocation %d, %d bytes) refused: %w",
				i+1, len(r.moves), m.allocation.ID(), m.copy.Source.Size, err)
			break
		}
	}
	if err := q.WaitCopies(); err != nil {
		waitErr := fmt.Errorf("relocation: waiting for %d copies to land: %w", len(r.moves), err)
		r.releaseOrLeak(storage.IsDevicePoisoned(err) || storage.IsDevicePoisoned(refused))
		if refused != nil {
			return nil, fmt.Errorf("%w; then %w", refused, waitErr)
		}
		return nil, waitErr
	}
	if refused != nil {
		r.Abandon()
		return nil, refused
	}
	r.phase = landed
	return &Landed{moves: r.moves, landed: true}, nil
}

// releaseOrLeak ends a relocation whose copy wait failed (design §7.5). On a
// poisoned device nothing will use the memory again, so the handles are
// released as in Abandon. Otherwise a copy may still be writing: the handles
// are dropped without release, so neither source nor target ever becomes
// free and neither is reused (R7), and each is bound (a Binding never
// released), so no later plan moves either: every planner leaves a page
// holding a bound slice alone, while a leaked target that merely looked live
// (nobody owns it) would be moved off, its room freed and reused under the
// copy that may still write there.
func (r *Relocation) releaseOrLeak(poisoned bool) {
	if poisoned {
		r.Abandon()
		return
	}
	for _, m := range r.moves {
		m.Allocation().Binding()
		m.Target().Binding()
	}
	r.phase = leaked
}

// Landed is the proof that every copy of a relocation landed: only
// Relocation.Copy makes a valid one, so pool.Arena.Commit can never re-point
// an allocation at bytes that did not arrive (R4). It owns the moves' handles
// until the commit releases them.
type Landed struct {
	moves  []Move
	landed bool
}

// Valid reports whether l came from a successful Relocation.Copy; it is false
// for nil and for the zero value, which Commit must refuse with a panic.
func (l *Landed) Valid() bool { return l != nil && l.landed }

// Moves returns the landed moves in plan order. The slice is a copy; the
// handles belong to the Landed until the commit releases them.
func (l *Landed) Moves() []Move {
	if l == nil {
		return nil
	}
	return slices.Clone(l.moves)
}

// All yields the landed moves in plan order without copying them, for the
// commit that walks them once.
func (l *Landed) All() iter.Seq2[int, Move] {
	return func(yield func(int, Move) bool) {
		if l == nil {
			return
		}
		for i, m := range l.moves {
			if !yield(i, m) {
				return
			}
		}
	}
}

// Bytes returns the bytes that landed: the sum of the requested sizes.
func (l *Landed) Bytes() uint64 {
	if l == nil {
		return 0
	}
	return copiedBytes(l.moves)
}

func copiedBytes(moves []Move) uint64 {
	var n uint64
	for _, m := range moves {
		n = storage.SatAdd(n, m.copy.Source.Size)
	}
	return n
}
