package torch

import "testing"

// roundup_power2_next_division's own example: 1200 B with 4 divisions lies
// between 1024 and 2048, whose steps are 1024, 1280, 1536 and 1792.
func TestRoundupPower2NextDivisionSourceExample(t *testing.T) {
	if got := nextDivision(1200, 4); got != 1280 {
		t.Fatalf("nextDivision(1200, 4) = %d, want 1280", got)
	}
	// round_size applies it only above 512 B x divisions: 1200 B takes the
	// 512 B rule, 1536.
	if got := (Settings{RoundupPower2Divisions: UniformDivisions(4)}).RoundSize(1200); got != 1536 {
		t.Fatalf("RoundSize(1200) with 4 divisions = %d, want 1536", got)
	}
}

// With 4 divisions a 5 MiB + 1 B request lies in [4, 8) MiB, steps of
// 1 MiB: the block is 6 MiB, not 5 MiB + 512 B, so the next size up to
// 6 MiB reuses it whole.
func TestRoundupPower2DivisionsRoundBlocksToTheNextDivision(t *testing.T) {
	for _, c := range []struct {
		divisions Divisions
		want      uint64
	}{{Divisions{}, 5*MiB + 512}, {UniformDivisions(4), 6 * MiB}, {UniformDivisions(1), 5*MiB + 512}} {
		a := NewWithConfig(Config{Settings: Settings{RoundupPower2Divisions: c.divisions}})
		b := mustMalloc(t, a, 5*MiB+1, 0)
		if b.Size != c.want {
			t.Fatalf("divisions %v: block %d, want %d", c.divisions, b.Size, c.want)
		}
	}
	a := NewWithConfig(Config{Settings: Settings{RoundupPower2Divisions: UniformDivisions(4)}})
	x := mustMalloc(t, a, 5*MiB+1, 0)
	a.Free(x)
	if y := mustMalloc(t, a, 6*MiB-100, 0); y.Addr != x.Addr || y.Size != 6*MiB {
		t.Fatalf("a 6 MiB - 100 B request did not reuse the 6 MiB block: %+v", y)
	}
}

// The per-range list "[256:1,512:2,>:8]" (PyTorch's documentation line):
// interval [256, 512) MiB has 1 division (no rounding), [512 MiB, 1 GiB) 2
// (steps of 256 MiB), 1 GiB and up 8 (steps of 128 MiB at [1, 2) GiB).
func TestRoundupPower2DivisionsPerRangeList(t *testing.T) {
	s, err := ParseConf("roundup_power2_divisions:[256:1,512:2,>:8]")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]uint64{
		{300*MiB + 1, 300*MiB + 512},
		{600*MiB + 1, 768 * MiB},
		{1536*MiB + 1, 1664 * MiB},
		{5 * MiB, 5 * MiB}, // below 256 MiB: 1 division, the first entry filled it
		{1024 * MiB, 1024 * MiB},
	} {
		if got := s.RoundSize(c[0]); got != c[1] {
			t.Fatalf("RoundSize(%d) = %d, want %d", c[0], got, c[1])
		}
		a := NewWithConfig(Config{Settings: s})
		if b := mustMalloc(t, a, c[0], 0); b.Size != c[1] {
			t.Fatalf("block for %d: %d, want %d", c[0], b.Size, c[1])
		}
	}
}

func TestRoundupNeverCrossesThePoolBoundary(t *testing.T) {
	s := Settings{RoundupPower2Divisions: UniformDivisions(16)}
	for size := uint64(MiB - 64*KiB); size <= MiB; size += 512 {
		if got := s.RoundSize(size); got > MiB || got%MinBlockSize != 0 {
			t.Fatalf("RoundSize(%d) = %d", size, got)
		}
	}
}
