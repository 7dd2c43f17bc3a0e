package handle_test

import (
	"errors"
	"testing"

	"github.com/gpumem/gpumem/internal/handle"
)

// design §12.2 scenario 6.
func TestNewLocationRoundTripsEveryField(t *testing.T) {
	cases := []struct {
		pool        uint8
		page, slice uint32
	}{
		{0, 0, 0},
		{1, 2, 3},
		{255, handle.MaxPage, handle.MaxSlice},
		{254, 0, handle.MaxSlice},
		{128, handle.MaxPage, 0},
		{2 + 63, 1 << 23, 1 << 30},
	}
	for _, c := range cases {
		l, err := handle.NewLocation(c.pool, c.page, c.slice)
		if err != nil {
			t.Fatalf("NewLocation(%d, %d, %d): %v", c.pool, c.page, c.slice, err)
		}
		if !l.Placed() || l.Pool() != c.pool || l.Page() != c.page || l.Slice() != c.slice {
			t.Fatalf("NewLocation(%d, %d, %d) reads back placed %v pool %d page %d slice %d",
				c.pool, c.page, c.slice, l.Placed(), l.Pool(), l.Page(), l.Slice())
		}
	}
}

func TestNewLocationBeyondMaximaReturnsErrIndexOverflow(t *testing.T) {
	for _, c := range []struct {
		name        string
		page, slice uint32
	}{
		{"page MaxPage+1", handle.MaxPage + 1, 0},
		{"slice MaxSlice+1", 0, handle.MaxSlice + 1},
		{"both at the top of uint32", ^uint32(0), ^uint32(0)},
	} {
		l, err := handle.NewLocation(7, c.page, c.slice)
		if !errors.Is(err, handle.ErrIndexOverflow) {
			t.Fatalf("%s: err = %v, want ErrIndexOverflow", c.name, err)
		}
		if l != handle.Uninit {
			t.Fatalf("%s: a refused location is %v, want Uninit", c.name, l)
		}
	}
}

func TestUninitIsNotPlaced(t *testing.T) {
	if handle.Uninit.Placed() || handle.Uninit.String() != "uninit" {
		t.Fatalf("Uninit: placed %v, %q", handle.Uninit.Placed(), handle.Uninit.String())
	}
	if l := handle.MustLocation(0, 0, 0); !l.Placed() || l == handle.Uninit {
		t.Fatal("pool 0 page 0 slice 0 is indistinguishable from Uninit")
	}
}

func TestWithPageAndWithSliceReplaceOneIndex(t *testing.T) {
	l := handle.MustLocation(9, 4, 5)
	if p := l.WithPage(40); p.Pool() != 9 || p.Page() != 40 || p.Slice() != 5 {
		t.Fatalf("WithPage(40) = %v", p)
	}
	if s := l.WithSlice(50); s.Pool() != 9 || s.Page() != 4 || s.Slice() != 50 {
		t.Fatalf("WithSlice(50) = %v", s)
	}
}

func TestMustLocationPanicsOnOverflowOrNegativeIndex(t *testing.T) {
	for name, f := range map[string]func(){
		"page MaxPage+1":   func() { handle.MustLocation(0, handle.MaxPage+1, 0) },
		"slice MaxSlice+1": func() { handle.MustLocation(0, 0, handle.MaxSlice+1) },
		"negative page":    func() { handle.MustLocation(0, -1, 0) },
		"negative slice":   func() { handle.MustLocation(0, 0, -1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("MustLocation with %s did not panic", name)
				}
			}()
			f()
		}()
	}
}

func FuzzLocationRoundTrip(f *testing.F) {
	f.Add(uint8(0), uint32(0), uint32(0))
	f.Add(uint8(255), uint32(handle.MaxPage), uint32(handle.MaxSlice))
	f.Add(uint8(254), uint32(handle.MaxPage+1), uint32(0))
	f.Add(uint8(1), uint32(0), uint32(handle.MaxSlice+1))
	f.Add(uint8(65), ^uint32(0), ^uint32(0))
	f.Fuzz(func(t *testing.T, pool uint8, page, slice uint32) {
		l, err := handle.NewLocation(pool, page, slice)
		if page > handle.MaxPage || slice > handle.MaxSlice {
			if !errors.Is(err, handle.ErrIndexOverflow) || l != handle.Uninit {
				t.Fatalf("NewLocation(%d, %d, %d) = %v, %v; want Uninit, ErrIndexOverflow", pool, page, slice, l, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("NewLocation(%d, %d, %d): %v", pool, page, slice, err)
		}
		if !l.Placed() || l.Pool() != pool || l.Page() != page || l.Slice() != slice {
			t.Fatalf("NewLocation(%d, %d, %d) reads back %v", pool, page, slice, l)
		}
		if l.WithPage(int(page)) != l || l.WithSlice(int(slice)) != l {
			t.Fatalf("replacing an index with itself changed %v", l)
		}
	})
}
