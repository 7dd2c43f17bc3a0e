package pool

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

const granuleSize = 2 * MiB

// granularPool returns a pool of 16 MiB pages (8 granules) on st.
func granularPool() *Sliced { return NewSliced(16*MiB, 16*MiB, false, 32, ArenaFirstIndex, Limits{}) }

// layout is a page's granules as a string: M mapped, . unmapped.
func layout(pg *page) string {
	b := make([]byte, len(pg.mapped))
	for i, m := range pg.mapped {
		b[i] = '.'
		if m {
			b[i] = 'M'
		}
	}
	return string(b)
}

// mustReserve serves size from held room, else a new page.
func mustReserve(t *testing.T, p *Sliced, st storage.Storage, size uint64) *handle.Handle {
	t.Helper()
	if h := p.TryReserve(st, size, nil, Bind{}); h != nil {
		return h
	}
	h, err := p.Alloc(st, size)
	if err != nil {
		t.Fatalf("reserve %d bytes: %v", size, err)
	}
	return h
}

func fill(t *testing.T, st storage.Storage, p *Sliced, h *handle.Handle, b byte) []byte {
	t.Helper()
	res, err := st.Resolve(p.Slice(h.Location()).Region)
	if err != nil {
		t.Fatal(err)
	}
	for i := range res.Bytes {
		res.Bytes[i] = b
	}
	return res.Bytes
}

// Granules, 2 MiB each, of one 16 MiB page:
//
//	A: [0, 3 MiB)       granules 0–1
//	B: [3 MiB, 11 MiB)  granules 1–5 (shares 1 with A, 5 with C)
//	C: [11 MiB, 16 MiB) granules 5–7
//
// Freeing B and cleaning up unmaps granules 2–4 only: 1 and 5 are shared
// with live slices and stay; A's and C's bytes are untouched.
func TestFreedMiddleGivesItsOwnGranulesBackAndKeepsTheEnds(t *testing.T) {
	st := hoststorage.NewGranularHost(32, granuleSize, nil)
	if st.Granule() == 0 {
		t.Skip("this system maps no granules")
	}
	p := granularPool()
	a := mustReserve(t, p, st, 3*MiB)
	pg := p.pages[0]
	if got := layout(pg); got != "MM......" {
		t.Fatalf("after A: %s, want MM......", got)
	}
	b := mustReserve(t, p, st, 8*MiB)
	c := mustReserve(t, p, st, 5*MiB)
	if got := layout(pg); got != "MMMMMMMM" || st.BytesAllocated() != 16*MiB {
		t.Fatalf("after A, B, C: %s, %d bytes mapped", got, st.BytesAllocated())
	}
	fa := fill(t, st, p, a, 0xA1)
	fill(t, st, p, b, 0xB2)
	fc := fill(t, st, p, c, 0xC3)
	b.Release()
	p.Cleanup(st, 0, Periodic, nil)
	if got := layout(pg); got != "MMMMMMMM" {
		t.Fatalf("a periodic sliced cleanup unmapped: %s", got)
	}
	if n := p.UnmapFree(st); n != 6*MiB {
		t.Fatalf("UnmapFree gave back %d bytes, want 6 MiB (granules 2–4)", n)
	}
	if got := layout(pg); got != "MM...MMM" {
		t.Fatalf("after freeing B: %s, want MM...MMM (shared granules 1 and 5 stay)", got)
	}
	if st.BytesAllocated() != 10*MiB || p.Usage().BytesMapped() != 10*MiB || p.Usage().BytesReserved != 16*MiB {
		t.Fatalf("allocated %d, usage %+v", st.BytesAllocated(), p.Usage())
	}
	if !bytes.Equal(fa, bytes.Repeat([]byte{0xA1}, int(3*MiB))) || !bytes.Equal(fc, bytes.Repeat([]byte{0xC3}, int(5*MiB))) {
		t.Fatal("the live ends lost bytes")
	}
	pg.check()
	// The freed middle serves again, mapping (zeroed) granules first.
	d := mustReserve(t, p, st, 7*MiB)
	if d.Location().Page() != 0 || layout(pg) != "MMMMMMMM" {
		t.Fatalf("reuse of the middle: %v, %s", d.Location(), layout(pg))
	}
	res, err := st.Resolve(p.Slice(d.Location()).Region.Sub(3*MiB, MiB)) // inside granule 3
	if err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsFunc(res.Bytes, func(r rune) bool { return r != 0 }) {
		t.Fatal("a remapped granule kept the freed slice's bytes")
	}
	pg.check()
	for _, h := range []*handle.Handle{a, c, d} {
		h.Release()
	}
}

func TestGranuleSharedByLiveAndFreeSliceStaysMapped(t *testing.T) {
	st := hoststorage.NewGranularSim(32, granuleSize, nil)
	p := granularPool()
	a := mustReserve(t, p, st, 1*MiB) // granule 0
	b := mustReserve(t, p, st, 2*MiB) // [1, 3) MiB: granules 0–1
	b.Release()
	p.UnmapFree(st)
	if got := layout(p.pages[0]); got != "M......." {
		t.Fatalf("after freeing B: %s, want M....... (granule 0 is A's)", got)
	}
	a.Release()
	p.UnmapFree(st)
	if got := layout(p.pages[0]); got != "........" || st.BytesAllocated() != 0 || st.BytesReserved() != 16*MiB {
		t.Fatalf("empty page: %s, %d mapped, %d reserved", got, st.BytesAllocated(), st.BytesReserved())
	}
	p.Cleanup(st, 0, Explicit, nil)
	if p.Pages() != 0 || st.BytesReserved() != 0 {
		t.Fatalf("explicit cleanup kept %d pages, %d reserved", p.Pages(), st.BytesReserved())
	}
}

func TestGuardedPageKeepsEveryGranule(t *testing.T) {
	st := hoststorage.NewGranularSim(32, granuleSize, nil)
	p := granularPool()
	a := mustReserve(t, p, st, 10*MiB)
	b := mustReserve(t, p, st, 1*MiB)
	guard, ok := p.Guard(b.Location())
	if !ok {
		t.Fatal("no guard")
	}
	a.Release()
	if n := p.UnmapFree(st); n != 0 || layout(p.pages[0]) != "MMMMMM.." {
		t.Fatalf("guarded page: unmapped %d bytes, layout %s", n, layout(p.pages[0]))
	}
	p.Cleanup(st, 0, Explicit, nil)
	if layout(p.pages[0]) != "MMMMMM.." {
		t.Fatalf("explicit cleanup unmapped a guarded page: %s", layout(p.pages[0]))
	}
	guard.Release()
	p.Cleanup(st, 0, Explicit, nil)
	if got := layout(p.pages[0]); got != ".....M.." {
		t.Fatalf("after the guard went: %s, want .....M.. (B at 10 MiB)", got)
	}
	b.Release()
}

func TestRefusedMappingLeavesTheReservationRefusedAndNothingHalfMapped(t *testing.T) {
	inner := hoststorage.NewGranularSim(32, granuleSize, nil)
	st := hoststorage.NewFaulty(inner)
	p := granularPool()

	// A new page whose first mapping is refused: the page goes back.
	st.RefuseNextMaps(1)
	if _, err := p.Alloc(st, 3*MiB); !errors.Is(err, storage.ErrOutOfMemory) {
		t.Fatalf("Alloc with its mapping refused: %v, want ErrOutOfMemory", err)
	}
	if p.Pages() != 0 || inner.BytesAllocated() != 0 || inner.BytesReserved() != 0 {
		t.Fatalf("refused Alloc left %d pages, %d mapped, %d reserved", p.Pages(), inner.BytesAllocated(), inner.BytesReserved())
	}

	// Held room whose window needs two runs of granules around a mapped
	// one: the first run maps, the second is refused, the first goes back.
	f1 := mustReserve(t, p, st, 4*MiB) // [0, 4) MiB: granules 0–1
	f2 := mustReserve(t, p, st, 2*MiB) // [4, 6) MiB: granule 2
	f1.Release()
	p.UnmapFree(st)
	f2.Release() // granule 2 stays mapped until the next cleanup
	pg := p.pages[0]
	if got := layout(pg); got != "..M....." {
		t.Fatalf("setup: %s, want ..M.....", got)
	}
	// An 8 MiB window from offset 0 needs runs [0, 2) and [3, 4); the
	// budget lets the first (two granules) through and refuses the second.
	st.RefuseAllocAbove(inner.BytesAllocated() + 2*granuleSize)
	if h := p.TryReserve(st, 8*MiB, nil, Bind{}); h != nil {
		t.Fatalf("TryReserve with its second mapping refused served %v", h.Location())
	}
	if got := layout(pg); got != "..M....." || len(pg.slices) != 1 || !pg.isEmpty() || inner.BytesAllocated() != granuleSize {
		t.Fatalf("refused TryReserve changed the page: %s, %d slices, %d mapped", got, len(pg.slices), inner.BytesAllocated())
	}
	if !slices.Equal(inner.MappedGranules(pg.region.ID), pg.mapped) {
		t.Fatalf("storage %v and page %v disagree", inner.MappedGranules(pg.region.ID), pg.mapped)
	}
	st.RefuseAllocAbove(0)
	h := mustReserve(t, p, st, 8*MiB)
	if got := layout(pg); got != "MMMM...." || h.Location().Page() != 0 {
		t.Fatalf("after the refusal lifted: %s at %v", got, h.Location())
	}
	pg.check()
	h.Release()
}

// A relocation target on a granular page is mapped before the plan returns.
func TestRelocationTargetMapsItsGranulesFirst(t *testing.T) {
	st := hoststorage.NewGranularSim(32, granuleSize, nil)
	// On granular storage a growth takes the largest page (PL31): 10 MiB.
	a := NewArena(PageSizing{Min: 4 * MiB, Max: 10 * MiB, Align: 32}, Limits{}, nil)
	old, err := a.Reserve(st, 1*MiB, nil, Bind{})
	if err != nil {
		t.Fatal(err)
	}
	big, err := a.Reserve(st, 10*MiB, nil, Bind{}) // grows to 10 MiB pages
	if err != nil {
		t.Fatal(err)
	}
	big.Release()
	a.UnmapFree(st)
	before := st.BytesAllocated()
	plan := a.Plan(relocation.Held, st, nil)
	if plan.Len() != 1 {
		t.Fatalf("plan of %d moves, want 1", plan.Len())
	}
	if st.BytesAllocated() != before+granuleSize {
		t.Fatalf("planned target mapped %d bytes, want one granule", st.BytesAllocated()-before)
	}
	landed, err := plan.Copy(st, relocation.HostCopies{})
	if err != nil {
		t.Fatal(err)
	}
	a.Commit(landed, st, nil)
	if a.HasOutdated() || st.BytesAllocated() != granuleSize || !slices.Equal(st.MappedGranules(a.Current().pages[0].region.ID), []bool{true, false, false, false, false}) {
		t.Fatalf("after commit: outdated %v, %d mapped", a.HasOutdated(), st.BytesAllocated())
	}
	a.Check()
	old.Release()
}

// A mapping refused for want of memory passes over the slice, not the page:
// a later free slice whose granules are still mapped serves the
// reservation without a storage call. 4 MiB slices A, B, C, D on granules
// 0–1, 2–3, 4–5, 6–7; A freed and its granules unmapped, C freed with its
// granules kept; with no more memory to map, 4 MiB lands on C.
func TestRefusedMappingPassesOverTheSliceToMappedRoom(t *testing.T) {
	inner := hoststorage.NewGranularSim(32, granuleSize, nil)
	st := hoststorage.NewFaulty(inner)
	p := granularPool()
	var hs []*handle.Handle
	for range 4 {
		hs = append(hs, mustReserve(t, p, st, 4*MiB))
	}
	hs[0].Release()
	p.UnmapFree(st)
	hs[2].Release()
	pg := p.pages[0]
	if got := layout(pg); got != "..MMMMMM" {
		t.Fatalf("setup: %s, want ..MMMMMM", got)
	}
	st.RefuseAllocAbove(inner.BytesAllocated()) // nothing more maps
	h := p.TryReserve(st, 4*MiB, nil, Bind{})
	if h == nil {
		t.Fatal("4 MiB with C's granules mapped and A's refused: no reservation, want C")
	}
	if off := p.Slice(h.Location()).Region.Offset - pg.region.Offset; off != 8*MiB {
		t.Fatalf("4 MiB at offset %d MiB, want 8 (C)", off/MiB)
	}
	if got := layout(pg); got != "..MMMMMM" || inner.BytesAllocated() != 12*MiB {
		t.Fatalf("after the reservation: %s, %d mapped; want ..MMMMMM, 12 MiB", got, inner.BytesAllocated())
	}
	// Nothing else fits: A's room cannot be mapped.
	if h2 := p.TryReserve(st, 4*MiB, nil, Bind{}); h2 != nil {
		t.Fatalf("a second 4 MiB was served at %v with nothing left to map", h2.Location())
	}
	st.RefuseAllocAbove(0)
	pg.check()
	h.Release()
	for _, x := range []*handle.Handle{hs[1], hs[3]} {
		x.Release()
	}
}
