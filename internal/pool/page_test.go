package pool

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// MiB is the unit most page tests draw in.
const MiB = 1 << 20

// drawPage draws a page's slices in offset order, sizes in units of unit
// bytes: a live slice as its requested size, a free one in parentheses, and
// padding as "+pad". A 32 MiB page holding 4 MiB with 28 MiB free, drawn in
// MiB, is "4 (28)"; a 40-byte slice padded to 64 bytes is "40+24".
func drawPage(pg *page, unit uint64) string {
	parts := make([]string, len(pg.slices))
	for i := range pg.slices {
		s := &pg.slices[i]
		d := strconv.FormatUint(s.Region.Size/unit, 10)
		if s.Padding > 0 {
			d += "+" + strconv.FormatUint(s.Padding/unit, 10)
		}
		if s.IsFree() {
			d = "(" + d + ")"
		}
		parts[i] = d
	}
	return strings.Join(parts, " ")
}

// expectOwnSlice fails the test unless ref's location names a slice of pg
// carrying ref's own descriptor (design §3.4: a location must never resolve
// to another allocation).
func expectOwnSlice(t *testing.T, pg *page, ref handle.Ref) *Slice {
	t.Helper()
	loc := ref.Descriptor().Location()
	if loc.Pool() != pg.pool || int(loc.Page()) != pg.index {
		t.Fatalf("allocation %d at %v, want pool %d page %d", ref.Descriptor().ID(), loc, pg.pool, pg.index)
	}
	s := pg.slice(loc.Slice())
	if s == nil {
		t.Fatalf("allocation %d at %v: no such slice on a page of %d slices", ref.Descriptor().ID(), loc, len(pg.slices))
	}
	if s.h.Descriptor() != ref.Descriptor() {
		t.Fatalf("allocation %d at %v: the slice there belongs to allocation %d", ref.Descriptor().ID(), loc, s.h.ID())
	}
	return s
}

// pageStep is one step of a page script:
//
//	reserve NAME SIZE   the reservation succeeds; NAME holds the user handle
//	refuse SIZE         no free slice holds SIZE: nothing changes
//	free NAME           release NAME's user handle (the slice becomes free)
//	coalesce            merge runs of adjacent free slices
//	at NAME OFFSET      NAME's slice starts at OFFSET
//
// Sizes and offsets are in the script's unit. want is the page drawn after
// the step (drawPage), empty for steps that only assert.
type pageStep struct {
	do   string
	want string
}

// runPageScript runs steps on one fresh page of size bytes (Host storage),
// checking after every step the drawing, the tiling invariants PL1–PL3 and
// that every live allocation's location names its own slice.
func runPageScript(t *testing.T, size, align, unit uint64, steps []pageStep) {
	t.Helper()
	st := hoststorage.NewHost(align, nil)
	r, err := st.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	pg := newPage(r, align, 7, 3, 0, nil, nil)
	g := handle.NewErrorGraph()
	live := map[string]*handle.Handle{}
	num := func(s string) uint64 {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("bad number %q", s)
		}
		return n * unit
	}
	for i, step := range steps {
		f := strings.Fields(step.do)
		before := drawPage(pg, unit)
		switch f[0] {
		case "reserve":
			h := pg.reserveClone(nil, num(f[2]))
			if h == nil {
				t.Fatalf("step %d %q: refused on %q", i, step.do, before)
			}
			live[f[1]] = h
		case "refuse":
			if h := pg.reserveClone(nil, num(f[1])); h != nil {
				t.Fatalf("step %d %q: served at %v on %q", i, step.do, h.Location(), before)
			}
			if got := drawPage(pg, unit); got != before {
				t.Fatalf("step %d %q: a refused reservation changed the page from %q to %q", i, step.do, before, got)
			}
		case "free":
			live[f[1]].Release()
			delete(live, f[1])
		case "coalesce":
			pg.coalesce(g)
		case "at":
			s := expectOwnSlice(t, pg, live[f[1]])
			if want := num(f[2]); s.Region.Offset != want {
				t.Fatalf("step %d %q: %s at offset %d, want %d", i, step.do, f[1], s.Region.Offset, want)
			}
		default:
			t.Fatalf("step %d: unknown command %q", i, step.do)
		}
		if step.want != "" {
			if got := drawPage(pg, unit); got != step.want {
				t.Fatalf("step %d %q: page %q, want %q", i, step.do, got, step.want)
			}
		}
		pg.check()
		for _, h := range live {
			expectOwnSlice(t, pg, h)
		}
	}
}

// design §12.4 scenario 15.
func TestFreedHalfOfAPageLeavesTwoFreeSlicesUntilCoalesce(t *testing.T) {
	runPageScript(t, 32*MiB, 32, MiB, []pageStep{
		{"reserve a 16", "16 (16)"},
		{"at a 0", ""},
		{"free a", "(16) (16)"},
		{"coalesce", "(32)"},
	})
}

// design §12.4 scenario 16: first fit, splitting, and coalescing at exact
// offsets.
func TestFirstFitReusesFreedSlicesAtExactOffsets(t *testing.T) {
	runPageScript(t, 32*MiB, 32, MiB, []pageStep{
		{"reserve a 4", "4 (28)"},
		{"reserve b 15", "4 15 (13)"},
		{"reserve c 8", "4 15 8 (5)"},
		{"reserve d 4", "4 15 8 4 (1)"},
		{"at d 27", ""},
		{"refuse 8", ""},
		{"free b", "4 (15) 8 4 (1)"},
		{"reserve e 9", "4 9 (6) 8 4 (1)"},
		{"at e 4", ""},
		{"refuse 9", ""},
		{"free c", "4 9 (6) (8) 4 (1)"},
		// Two adjacent free slices of 6 and 8 hold 14, but first fit looks
		// at one slice at a time.
		{"refuse 9", ""},
		{"coalesce", "4 9 (14) 4 (1)"},
		{"at d 27", ""},
		{"reserve f 9", "4 9 9 (5) 4 (1)"},
		{"at f 13", ""},
		{"free a", ""},
		{"free d", "(4) 9 9 (5) (4) (1)"},
		{"coalesce", "(4) 9 9 (10)"},
		{"at e 4", ""},
		{"at f 13", ""},
	})
}

// design §12.4 scenario 17: a freed slice is reused by its effective size
// (size + padding), so its padding bytes are never lost from the page.
func TestReservationFitsTheEffectiveSizeOfAFreedSlice(t *testing.T) {
	runPageScript(t, 256, 32, 1, []pageStep{
		{"reserve a 40", "40+24 (192)"},
		{"reserve b 192", "40+24 192"},
		{"free a", "(40+24) 192"},
		// 8 bytes need 32 with padding: the 64-byte slice splits 32 + 32.
		{"reserve c 8", "8+24 (32) 192"},
		{"reserve d 32", "8+24 32 192"},
		{"at d 32", ""},
		{"refuse 1", ""},
	})
}

func TestPagePaddingHonoursAnAlignmentThatIsNotAPowerOfTwo(t *testing.T) {
	runPageScript(t, 200, 50, 1, []pageStep{
		{"reserve a 1", "1+49 (150)"},
		{"reserve b 51", "1+49 51+49 (50)"},
		{"at b 50", ""},
		{"refuse 51", ""},
		{"reserve c 50", "1+49 51+49 50"},
	})
}

func TestCoalesceLeavesALoneFreeSliceAndItsHandleAlone(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	r, _ := st.Alloc(8 * MiB)
	pg := newPage(r, 32, 2, 0, 0, nil, nil)
	a := pg.reserveClone(nil, 2*MiB)
	b := pg.reserveClone(nil, 2*MiB)
	a.Release()
	freeHandle := pg.slices[0].h
	pg.coalesce(nil)
	if got := drawPage(pg, MiB); got != "(2) 2 (4)" {
		t.Fatalf("page %q, want %q", got, "(2) 2 (4)")
	}
	if pg.slices[0].h != freeHandle {
		t.Fatal("coalesce replaced the handle of a lone free slice")
	}
	expectOwnSlice(t, pg, b)
}

func TestCoalesceReleasesMergedHandlesAndClearsTheirMarks(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	r, _ := st.Alloc(8 * MiB)
	pg := newPage(r, 32, 2, 0, 0, nil, nil)
	g := handle.NewErrorGraph()
	a := pg.reserveClone(nil, 1*MiB)
	b := pg.reserveClone(nil, 1*MiB)
	c := pg.reserveClone(nil, 1*MiB)
	f := g.Fail(errors.New("kernel failed"))
	taint := &handle.Taint{}
	taint.Mark(g, f, 0, 512)
	pg.slices[1].SetTaint(taint)
	merged := []*handle.Handle{pg.slices[0].h, pg.slices[1].h}
	a.Release()
	b.Release()
	pg.coalesce(g)
	if got := drawPage(pg, MiB); got != "(2) 1 (5)" {
		t.Fatalf("page %q, want %q", got, "(2) 1 (5)")
	}
	for _, h := range merged {
		if !h.Released() {
			t.Fatalf("merged slice handle of allocation %d not released", h.ID())
		}
	}
	if pg.slices[0].Taint() != nil {
		t.Fatal("merged free slice kept failure marks")
	}
	if n := g.Carriers(f); n != 0 {
		t.Fatalf("failure still has %d carriers after its only slice merged", n)
	}
	// The live slice after the merged run moved from index 2 to 1.
	if s := expectOwnSlice(t, pg, c); s.Region.Offset != 2*MiB {
		t.Fatalf("c at offset %d, want %d", s.Region.Offset, 2*MiB)
	}
	pg.check()
}

func TestSplitRenumbersEverySliceAfterIt(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	r, _ := st.Alloc(8 * MiB)
	pg := newPage(r, 32, 2, 5, 0, nil, nil)
	hs := make([]*handle.Handle, 4)
	for i := range hs {
		hs[i] = pg.reserveClone(nil, 1*MiB)
	}
	hs[0].Release()
	hs[0] = pg.reserveClone(nil, 256<<10) // splits slice 0: every later slice shifts by one
	for i, h := range hs {
		s := expectOwnSlice(t, pg, h)
		if want := uint64(i) * MiB; s.Region.Offset != want {
			t.Fatalf("allocation %d at offset %d, want %d", i, s.Region.Offset, want)
		}
	}
	if got, want := hs[3].Location().Slice(), uint32(4); got != want {
		t.Fatalf("last allocation at slice %d, want %d", got, want)
	}
	pg.check()
}

// pageCheckPanics reports the panic message of pg.check, or "".
func pageCheckPanics(pg *page) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			msg = fmt.Sprint(r)
		}
	}()
	pg.check()
	return ""
}

// The checks the property tests rely on must themselves catch a broken page.
func TestPageCheckCatchesBrokenTiling(t *testing.T) {
	cases := map[string]struct {
		breakIt func(pg *page)
		want    string
	}{
		"Gap":            {func(pg *page) { pg.slices[1].Region.Offset++ }, "(PL1)"},
		"ShortLastSlice": {func(pg *page) { pg.slices[len(pg.slices)-1].Region.Size-- }, "(PL2)"},
		"StaleLocation": {func(pg *page) {
			pg.slices[1].h.Descriptor().SetLocation(pg.loc(0))
		}, "(PL3)"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			st := hoststorage.NewSim(32, nil)
			r, _ := st.Alloc(1024)
			pg := newPage(r, 32, 2, 0, 0, nil, nil)
			pg.reserveClone(nil, 100)
			pg.reserveClone(nil, 100)
			pg.reserveClone(nil, 40)
			if msg := pageCheckPanics(pg); msg != "" {
				t.Fatalf("intact page fails its check: %s", msg)
			}
			c.breakIt(pg)
			if msg := pageCheckPanics(pg); !strings.Contains(msg, c.want) {
				t.Fatalf("check of a broken page: %q, want a panic naming %s", msg, c.want)
			}
		})
	}
}

// reserveClone is tryReserve(st, 0, size) for a clone (the zero Bind), nil
// when the storage refuses to map.
func (p *page) reserveClone(st storage.Storage, size uint64) *handle.Handle {
	h, _ := p.tryReserve(st, 0, size, Bind{}, nil)
	return h
}

// coalesceFor gives first fit the layout coalesce would: when the run that
// holds the reservation starts with a slice of exactly its size, that slice
// is kept apart and only the rest of the run merges, so carving it moves no
// slice; otherwise the run merges as usual. Each case builds two identical
// pages (buffers bound as Stream.Alloc binds them, then freed), reserves on
// one after coalesce and on the other after coalesceFor, and wants the same
// drawing; kept says whether the slice after the reserved one must keep
// its descriptor (nothing merged, split or renumbered there).
func TestCoalesceForGivesTheLayoutOfMergeThenCarve(t *testing.T) {
	cases := []struct {
		name    string
		sizes   []uint64 // MiB reserved in order on an 8 MiB page
		free    []int    // indices of sizes freed
		reserve uint64   // MiB
		want    string
		kept    bool
	}{
		{"exact head, lone rest", []uint64{1}, []int{0}, 1, "1 (7)", true},
		{"exact head, live neighbour", []uint64{1, 2}, []int{0}, 1, "1 2 (5)", false},
		{"exact head after a live slice, run of three", []uint64{1, 2, 1, 1}, []int{1, 2}, 2, "1 2 (1) 1 (3)", false},
		{"exact head, merged rest", []uint64{1, 1, 1}, []int{0, 1, 2}, 1, "1 (7)", false},
		{"head too small", []uint64{1, 1}, []int{0, 1}, 2, "2 (6)", false},
		{"head too large", []uint64{2}, []int{0}, 1, "1 (7)", false},
		{"first run too small, second exact", []uint64{1, 1, 2, 1}, []int{0, 2}, 2, "(1) 1 2 1 (3)", false},
	}
	build := func(t *testing.T) (*page, *handle.ErrorGraph) {
		st := hoststorage.NewHost(32, nil)
		r, err := st.Alloc(8 * MiB)
		if err != nil {
			t.Fatal(err)
		}
		return newPage(r, 32, 2, 0, 0, nil, &handle.Recycler{}), handle.NewErrorGraph()
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// way 0: coalesce, then a reservation's clone; 1: coalesceFor
			// with renew, then a clone; 2: coalesceFor, then tryReserve
			// binding a new buffer at once.
			var got [3]string
			for way := range got {
				claim := way > 0
				pg, g := build(t)
				var bufs []*handle.Handle
				for _, mib := range c.sizes {
					reserved := pg.reserveClone(nil, mib*MiB)
					buf := handle.New(handle.Uninit)
					pg.slices[reserved.Location().Slice()].Rebind(buf, 0, g)
					reserved.Release()
					bufs = append(bufs, buf)
				}
				for _, i := range c.free {
					bufs[i].Release()
				}
				last := pg.slices[len(pg.slices)-1].h.ID()
				if claim {
					pg.coalesceFor(g, c.reserve*MiB, way == 1)
				} else {
					pg.coalesce(g)
				}
				var h *handle.Handle
				if way == 2 {
					h = handle.New(handle.Uninit)
					if got, err := pg.tryReserve(nil, 0, c.reserve*MiB, Bind{To: h, Cursor: 7}, g); got != h || err != nil {
						t.Fatalf("tryReserve binding %d MiB refused on %q: %v", c.reserve, drawPage(pg, MiB), err)
					}
					if s := expectOwnSlice(t, pg, h); s.Cursor != 7 || s.Handle() == h {
						t.Fatalf("bound slice: cursor %d, want 7, holding a clone of the buffer's handle", s.Cursor)
					}
				} else if h = pg.reserveClone(nil, c.reserve*MiB); h == nil {
					t.Fatalf("way %d: reservation of %d MiB refused on %q", way, c.reserve, drawPage(pg, MiB))
				}
				if i := int(h.Location().Slice()) + 1; claim && c.kept && (i >= len(pg.slices) || pg.slices[i].h.ID() != last) {
					t.Fatalf("way %d: the free slice after the kept head was merged or split: %q", way, drawPage(pg, MiB))
				}
				if way == 1 && !h.Descriptor().RecycledBy(pg.spares) {
					t.Fatal("the reserved slice carries a freed buffer's descriptor, not one of the page's own")
				}
				pg.check()
				got[way] = drawPage(pg, MiB)
				h.Release()
			}
			if got[0] != c.want || got[1] != c.want || got[2] != c.want {
				t.Fatalf("merge then carve drew %q, coalesceFor then carve %q, then a bound carve %q; want %q", got[0], got[1], got[2], c.want)
			}
		})
	}
}

// A rescan starts at the run holding the lowest slice a release named
// (Signal.Lowest), not at slice 0, and still merges that run whole: a free
// slice just before the freed one joins it; free room before the run still
// wins first fit; hints stay exact (check).
func TestCoalesceRescansFromTheLowestFreedSlice(t *testing.T) {
	st := hoststorage.NewHost(32, nil)
	r, err := st.Alloc(8 * MiB)
	if err != nil {
		t.Fatal(err)
	}
	pg := newPage(r, 32, 2, 0, 0, nil, &handle.Recycler{})
	g := handle.NewErrorGraph()
	var hs []*handle.Handle
	for range 6 {
		hs = append(hs, pg.reserveClone(nil, 1*MiB))
	}
	hs[1].Release()
	hs[4].Release()
	pg.coalesce(g)
	if got := drawPage(pg, MiB); got != "1 (1) 1 1 (1) 1 (2)" {
		t.Fatalf("page %q", got)
	}
	hs[3].Release() // slice 3, between live 2 and free 4
	if low := pg.changed.Lowest(); low != 3 {
		t.Fatalf("lowest freed index %d, want 3", low)
	}
	pg.coalesce(g)
	if got := drawPage(pg, MiB); got != "1 (1) 1 (2) 1 (2)" {
		t.Fatalf("after freeing slice 3: %q, want its run merged with slice 4", got)
	}
	pg.check()
	hs[5].Release() // slice 4 now, merging with the tail
	pg.coalesceFor(g, 2*MiB, true)
	if got := drawPage(pg, MiB); got != "1 (1) 1 (5)" {
		t.Fatalf("after freeing the last live slice but one: %q", got)
	}
	if h := pg.reserveClone(nil, 1*MiB); h.Location().Slice() != 1 {
		t.Fatalf("1 MiB went to slice %d, want the hole at slice 1 (first fit)", h.Location().Slice())
	}
	pg.check()
}
