package relocation

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// side is one slice of a test move: a storage allocation standing in for the
// page, and the handle a pool's slice would hold for it.
type side struct {
	region storage.Region
	slice  *handle.Handle // the pool slice's own handle
}

// plan is a relocation built the way pool.Arena.Plan builds one: for every
// move a source allocation (slice handle, plus a user handle when the user
// still holds it) and a reserved target slice.
type plan struct {
	st      storage.Storage
	sources []side
	targets []side
	users   []*handle.Handle // nil where the user released the allocation
	r       *Relocation
}

// newPlan plans one move per size. Sources hold a distinct byte pattern;
// targets start zeroed. withUsers keeps a user handle on every source.
func newPlan(t *testing.T, st storage.Storage, withUsers bool, sizes ...uint64) *plan {
	t.Helper()
	p := &plan{st: st}
	var moves []Move
	for i, size := range sizes {
		src := p.alloc(t, size)
		tgt := p.alloc(t, size)
		if res, err := st.Resolve(src.region); err == nil {
			for j := range res.Bytes {
				res.Bytes[j] = byte(i*31 + j%251 + 1)
			}
		}
		var user *handle.Handle
		if withUsers {
			user = src.slice.Clone()
		}
		p.sources = append(p.sources, src)
		p.targets = append(p.targets, tgt)
		p.users = append(p.users, user)
		moves = append(moves, NewMove(src.slice.Clone(), tgt.slice.Clone(), StorageCopy{Source: src.region, Target: tgt.region}))
	}
	p.r = New(moves)
	return p
}

func (p *plan) alloc(t *testing.T, size uint64) side {
	t.Helper()
	region, err := p.st.Alloc(size)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", size, err)
	}
	return side{region: region, slice: handle.New(handle.MustLocation(0, int(region.ID%handle.MaxPage), 0))}
}

func (p *plan) bytesOf(t *testing.T, s side) []byte {
	t.Helper()
	res, err := p.st.Resolve(s.region)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	return slices.Clone(res.Bytes)
}

// wantTargetsFree checks every target slice is free: the relocation released
// its reserved handle.
func (p *plan) wantTargetsFree(t *testing.T, free bool) {
	t.Helper()
	for i, tgt := range p.targets {
		if tgt.slice.IsFree() != free {
			t.Errorf("target %d IsFree = %v, want %v (refs %d)", i, !free, free, tgt.slice.Descriptor().Refs())
		}
	}
}

// wantSourcesUntouched checks every source still holds its own pattern at its
// own location, with exactly the slice and user references it had before.
func (p *plan) wantSourcesUntouched(t *testing.T, originals [][]byte) {
	t.Helper()
	for i, src := range p.sources {
		wantRefs := 1
		if p.users[i] != nil {
			wantRefs = 2
		}
		if got := src.slice.Descriptor().Refs(); got != wantRefs {
			t.Errorf("source %d refs = %d, want %d", i, got, wantRefs)
		}
		if src.slice.Location() != handle.MustLocation(0, int(src.region.ID%handle.MaxPage), 0) {
			t.Errorf("source %d moved to %v", i, src.slice.Location())
		}
		if !bytes.Equal(p.bytesOf(t, src), originals[i]) {
			t.Errorf("source %d bytes changed", i)
		}
	}
}

func (p *plan) sourceBytes(t *testing.T) [][]byte {
	var out [][]byte
	for _, src := range p.sources {
		out = append(out, p.bytesOf(t, src))
	}
	return out
}

// loggingQueue performs copies with HostCopies and logs every call; it fails
// on cue.
type loggingQueue struct {
	waitDeviceErr error
	refuseCopyAt  int // 1-based; 0 = never
	copyErr       error
	waitCopiesErr error

	copies int
	log    []string
}

func (q *loggingQueue) WaitDevice() error {
	q.log = append(q.log, "WaitDevice")
	return q.waitDeviceErr
}

func (q *loggingQueue) Copy(st storage.Storage, c StorageCopy) error {
	q.copies++
	q.log = append(q.log, fmt.Sprintf("Copy(%d)", q.copies))
	if q.copies == q.refuseCopyAt {
		return q.copyErr
	}
	return HostCopies{}.Copy(st, c)
}

func (q *loggingQueue) WaitCopies() error {
	q.log = append(q.log, "WaitCopies")
	return q.waitCopiesErr
}

func wantLog(t *testing.T, q *loggingQueue, copies int) {
	t.Helper()
	want := []string{"WaitDevice"}
	for i := 1; i <= copies; i++ {
		want = append(want, fmt.Sprintf("Copy(%d)", i))
	}
	want = append(want, "WaitCopies")
	if !slices.Equal(q.log, want) {
		t.Fatalf("queue calls\n got %q\nwant %q", q.log, want)
	}
}

var errQueue = errors.New("queue refused")

func TestCopyWaitsForTheDeviceCopiesInPlanOrderThenWaitsForCopies(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := newPlan(t, st, false, 96, 4*mib+3, 1)
	originals := p.sourceBytes(t)
	q := &loggingQueue{}

	l, err := p.r.Copy(st, q)
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	wantLog(t, q, 3)
	if !l.Valid() {
		t.Fatal("Landed from a successful Copy is not Valid")
	}
	moves := l.Moves()
	if len(moves) != 3 {
		t.Fatalf("Landed has %d moves, want 3", len(moves))
	}
	for i, m := range moves {
		if m.Allocation().Descriptor() != p.sources[i].slice.Descriptor() || m.Target().Descriptor() != p.targets[i].slice.Descriptor() {
			t.Errorf("landed move %d is not plan move %d", i, i)
		}
		if !bytes.Equal(p.bytesOf(t, p.targets[i]), originals[i]) {
			t.Errorf("target %d does not hold source %d's bytes", i, i)
		}
	}
	if l.Bytes() != 96+4*mib+3+1 || p.r.Bytes() != l.Bytes() {
		t.Errorf("Bytes = %d (relocation %d), want %d", l.Bytes(), p.r.Bytes(), 96+4*mib+3+1)
	}
	// The clones now belong to the Landed, for the commit to release: both
	// sides stay referenced, and Abandon can no longer release them.
	p.r.Abandon()
	p.wantTargetsFree(t, false)
	for i, src := range p.sources {
		if src.slice.IsFree() {
			t.Errorf("source %d free before the commit", i)
		}
	}
	if p.r.Leaked() {
		t.Error("a landed relocation reports Leaked")
	}
}

func TestCopyOfAnEmptyRelocationStillWaitsAndLands(t *testing.T) {
	r := New(nil)
	if !r.IsEmpty() || r.Len() != 0 {
		t.Fatalf("New(nil): IsEmpty %v Len %d", r.IsEmpty(), r.Len())
	}
	q := &loggingQueue{}
	l, err := r.Copy(hoststorage.NewHost(32, nil), q)
	if err != nil || !l.Valid() || len(l.Moves()) != 0 {
		t.Fatalf("Copy = (%v, %v), want a valid empty Landed", l, err)
	}
	wantLog(t, q, 0)
}

func TestCopyAbandonsWithoutCopyingWhenTheDeviceWaitFails(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := newPlan(t, st, true, 64, 128)
	originals := p.sourceBytes(t)
	q := &loggingQueue{waitDeviceErr: errQueue}

	l, err := p.r.Copy(st, q)
	if !errors.Is(err, errQueue) || l != nil {
		t.Fatalf("Copy = (%v, %v), want (nil, %v)", l, err, errQueue)
	}
	if want := []string{"WaitDevice"}; !slices.Equal(q.log, want) {
		t.Fatalf("queue calls %q, want %q", q.log, want)
	}
	p.wantTargetsFree(t, true)
	p.wantSourcesUntouched(t, originals)
	if p.r.Leaked() {
		t.Error("an abandoned relocation reports Leaked")
	}
}

func TestCopyRefusedAtTheKthMoveStillWaitsThenAbandons(t *testing.T) {
	for k := 1; k <= 3; k++ {
		t.Run(fmt.Sprintf("refused at copy %d of 3", k), func(t *testing.T) {
			st := hoststorage.NewHost(32, nil)
			p := newPlan(t, st, true, 64, 96, 128)
			originals := p.sourceBytes(t)
			q := &loggingQueue{refuseCopyAt: k, copyErr: errQueue}

			l, err := p.r.Copy(st, q)
			if !errors.Is(err, errQueue) || l != nil {
				t.Fatalf("Copy = (%v, %v), want (nil, %v)", l, err, errQueue)
			}
			wantLog(t, q, k)
			p.wantTargetsFree(t, true)
			p.wantSourcesUntouched(t, originals)
			if p.r.Leaked() {
				t.Error("an abandoned relocation reports Leaked")
			}
		})
	}
}

func TestCopyLeaksSourceAndTargetWhenTheCopyWaitFailsOnAHealthyDevice(t *testing.T) {
	for _, refuseAt := range []int{0, 2} {
		t.Run(fmt.Sprintf("refused copy %d", refuseAt), func(t *testing.T) {
			st := hoststorage.NewHost(32, nil)
			// No user handles: only the relocation's clones keep the sources
			// from being free.
			p := newPlan(t, st, false, 64, 96)
			q := &loggingQueue{refuseCopyAt: refuseAt, copyErr: errQueue, waitCopiesErr: errWait}

			l, err := p.r.Copy(st, q)
			if l != nil || !errors.Is(err, errWait) {
				t.Fatalf("Copy = (%v, %v), want the wait error", l, err)
			}
			if refuseAt != 0 && !errors.Is(err, errQueue) {
				t.Fatalf("Copy error %v does not carry the refusal", err)
			}
			if !p.r.Leaked() {
				t.Fatal("Leaked() = false after a failed non-poison wait")
			}
			p.wantTargetsFree(t, false)
			for i, src := range p.sources {
				if src.slice.IsFree() {
					t.Errorf("source %d free after a leaked relocation", i)
				}
				// Bound: no later plan may move either side (R7).
				if !src.slice.IsBound() || !p.targets[i].slice.IsBound() {
					t.Errorf("move %d: source bound %v, target bound %v after a leak; want both", i, src.slice.IsBound(), p.targets[i].slice.IsBound())
				}
			}
			// Leaked stays leaked: an abandon on the error path releases nothing.
			p.r.Abandon()
			p.wantTargetsFree(t, false)
		})
	}
}

var errWait = errors.New("wait failed")

func TestCopyReleasesSourceAndTargetWhenTheCopyWaitFindsTheDevicePoisoned(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := newPlan(t, st, false, 64, 96)
	poisoned := fmt.Errorf("illegal address: %w", storage.ErrDevicePoisoned)
	q := &loggingQueue{waitCopiesErr: poisoned}

	l, err := p.r.Copy(st, q)
	if l != nil || !storage.IsDevicePoisoned(err) {
		t.Fatalf("Copy = (%v, %v), want a poisoned error", l, err)
	}
	if p.r.Leaked() {
		t.Fatal("Leaked() = true on a poisoned device")
	}
	p.wantTargetsFree(t, true)
	for i, src := range p.sources {
		if !src.slice.IsFree() {
			t.Errorf("source %d not free after a poisoned wait", i)
		}
	}
}

func TestCopyThroughFaultyStorageLeaksOrReleasesByTheWaitError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fail   error
		leaked bool
	}{
		{"refused wait", nil, true},
		{"poisoned wait", storage.ErrDevicePoisoned, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := hoststorage.NewFaulty(hoststorage.NewHost(32, nil))
			p := newPlan(t, f, false, 64)
			f.FailWith(tc.fail)
			f.RefuseWaits(func(n int) bool { return n == 2 }) // WaitCopies, after WaitDevice

			_, err := p.r.Copy(f, HostCopies{Faults: f})
			if err == nil {
				t.Fatal("Copy succeeded through a refused wait")
			}
			if p.r.Leaked() != tc.leaked {
				t.Fatalf("Leaked() = %v, want %v", p.r.Leaked(), tc.leaked)
			}
			p.wantTargetsFree(t, !tc.leaked)
			if p.sources[0].slice.IsFree() == tc.leaked {
				t.Fatalf("source IsFree = %v, want %v", !tc.leaked, !tc.leaked)
			}
		})
	}
}

func TestAbandonReleasesEveryCloneOnceEvenWhenCalledTwice(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := newPlan(t, st, true, 64, 96)
	originals := p.sourceBytes(t)
	p.r.Abandon()
	p.r.Abandon() // a second release of a handle would panic in package handle
	p.wantTargetsFree(t, true)
	p.wantSourcesUntouched(t, originals)
	for i, m := range p.r.Moves() {
		if !m.Allocation().Released() || !m.Target().Released() {
			t.Errorf("move %d: clones not released", i)
		}
	}
}

func TestARelocationIsCopiedOnlyOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first func(r *Relocation, st storage.Storage)
	}{
		{"after landing", func(r *Relocation, st storage.Storage) { _, _ = r.Copy(st, HostCopies{}) }},
		{"after Abandon", func(r *Relocation, _ storage.Storage) { r.Abandon() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := hoststorage.NewHost(32, nil)
			p := newPlan(t, st, false, 64)
			tc.first(p.r, st)
			defer func() {
				if r := recover(); r == nil {
					t.Fatal("second use of a relocation did not panic")
				}
			}()
			_, _ = p.r.Copy(st, HostCopies{})
		})
	}
}

func TestOnlyCopyMakesAValidLanded(t *testing.T) {
	var nilLanded *Landed
	if nilLanded.Valid() || (&Landed{}).Valid() {
		t.Fatal("a nil or zero Landed reports Valid")
	}
	if nilLanded.Moves() != nil || nilLanded.Bytes() != 0 {
		t.Fatal("a nil Landed has moves")
	}
}

func TestMovesAreReadOnlyCopiesOfThePlan(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	p := newPlan(t, st, false, 64, 96)
	moves := p.r.Moves()
	moves[0] = moves[1]
	if p.r.Moves()[0].Copy() == p.r.Moves()[1].Copy() {
		t.Fatal("writing the returned slice changed the plan")
	}
	if p.r.Len() != 2 || p.r.IsEmpty() {
		t.Fatalf("Len %d IsEmpty %v, want 2 false", p.r.Len(), p.r.IsEmpty())
	}
}

func TestNewMoveRefusesMovesThatBreakR5(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	a, _ := st.Alloc(64)
	b, _ := st.Alloc(64)
	src := handle.New(handle.MustLocation(0, 1, 0))
	tgt := handle.New(handle.MustLocation(1, 1, 0))
	cases := map[string]func(){
		"nil allocation": func() { NewMove(nil, tgt, StorageCopy{a, b}) },
		"nil target":     func() { NewMove(src, nil, StorageCopy{a, b}) },
		"onto itself":    func() { NewMove(src, src.Clone(), StorageCopy{a, b}) },
		"unequal sizes":  func() { NewMove(src, tgt, StorageCopy{a, b.Sub(0, 32)}) },
		"within a page":  func() { NewMove(src, tgt, StorageCopy{a.Sub(0, 32), a.Sub(32, 32)}) },
		"zero move":      func() { New([]Move{{}}) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("did not panic")
				}
				if msg := fmt.Sprint(r); len(msg) < 12 || msg[:12] != "relocation: " {
					t.Fatalf("panic %q lacks the relocation: prefix", msg)
				}
			}()
			f()
		})
	}
	m := NewMove(src, tgt, StorageCopy{a, b})
	if m.Allocation() != src || m.Target() != tgt || m.Copy() != (StorageCopy{a, b}) {
		t.Fatal("accessors do not return what NewMove took")
	}
}
