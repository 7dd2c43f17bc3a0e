package torch

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// The brief's line, in String's key order: it parses to the typed fields
// and comes back byte for byte.
func TestParseConfReadsPyTorchSyntaxAndStringGivesTheLineBack(t *testing.T) {
	line := "expandable_segments:True,max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8],garbage_collection_threshold:0.6"
	s, err := ParseConf(line)
	if err != nil {
		t.Fatal(err)
	}
	var want Divisions
	for i := range want {
		switch {
		case i <= 8:
			want[i] = 1 // the first entry fills every interval below 256 MiB too
		case i == 9:
			want[i] = 2
		default:
			want[i] = 8 // ">" fills every interval above the last one named
		}
	}
	if !s.ExpandableSegments || s.MaxSplitSizeMB != 128 || s.GarbageCollectionThreshold != 0.6 || s.RoundupPower2Divisions != want {
		t.Fatalf("parsed %+v", s)
	}
	if got := s.String(); got != line {
		t.Fatalf("String() = %q, want %q", got, line)
	}
	// PyTorch drops spaces and accepts a trailing comma; the meaning is the same.
	s2, err := ParseConf(" expandable_segments : True , max_split_size_mb:128, roundup_power2_divisions:[ 256:1 , 512:2 , >:8 ], garbage_collection_threshold:0.6,")
	if err != nil || s2.String() != line {
		t.Fatalf("spaced line: %v, %q", err, s2.String())
	}
}

func TestParseConfOfNothingIsPyTorchsDefaults(t *testing.T) {
	for _, line := range []string{"", "   ", "expandable_segments:False"} {
		s, err := ParseConf(line)
		if err != nil || !s.IsDefault() || s.String() != "" {
			t.Fatalf("%q: %+v, %v", line, s, err)
		}
	}
	if (Settings{}).maxSplitBytes() != math.MaxUint64 || (Settings{}).nonSplitRoundingBytes() != LargeBuffer {
		t.Fatal("zero Settings are not PyTorch's defaults")
	}
}

func TestParseConfErrorsAreTypedAndNameTheKey(t *testing.T) {
	cases := []struct {
		line string
		want error
		key  string
	}{
		{"max_split_size_mb:10", ErrConfValue, KeyMaxSplitSize},
		{"max_split_size_mb:-5", ErrConfValue, KeyMaxSplitSize},
		{"max_non_split_rounding_mb:19", ErrConfValue, KeyMaxNonSplitRounding},
		{"expandable_segments:true", ErrConfValue, KeyExpandableSegments},
		{"garbage_collection_threshold:1.0", ErrConfValue, KeyGarbageCollectionThreshold},
		{"garbage_collection_threshold:0", ErrConfValue, KeyGarbageCollectionThreshold},
		{"roundup_power2_divisions:3", ErrConfValue, KeyRoundupPower2Divisions},
		{"roundup_power2_divisions:0", ErrConfValue, KeyRoundupPower2Divisions},
		{"roundup_power2_divisions:[256:3]", ErrConfValue, KeyRoundupPower2Divisions},
		{"roundup_power2_divisions:[300:2]", ErrConfValue, KeyRoundupPower2Divisions},
		{"roundup_power2_divisions:[256:2", ErrConfSyntax, KeyRoundupPower2Divisions},
		{"roundup_power2_divisions:[256:2 512:4]", ErrConfValue, KeyRoundupPower2Divisions}, // spaces vanish: 2512 divisions
		{"max_split_size_mb", ErrConfSyntax, KeyMaxSplitSize},
		{"max_split_size_mb:", ErrConfSyntax, KeyMaxSplitSize},
		{"max_split_size_mb:128 expandable_segments:True", ErrConfValue, KeyMaxSplitSize},
		{"max_split_size_mb:128;expandable_segments:True", ErrConfValue, KeyMaxSplitSize},
		{"max_split_size:128", ErrConfUnknownKey, "max_split_size"},
		{"backend:cudaMallocAsync", ErrConfUnmodelled, "backend"},
		{"backend:jemalloc", ErrConfValue, "backend"},
	}
	for _, c := range cases {
		_, err := ParseConf(c.line)
		var ce *ConfError
		if !errors.Is(err, c.want) || !errors.As(err, &ce) || ce.Key != c.key || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%q: %v (want %v naming %s)", c.line, err, c.want, c.key)
		}
	}
}

func TestParseConfKeepsUnmodelledOptionsForTheLine(t *testing.T) {
	line := "max_split_size_mb:64,backend:native,release_lock_on_cudamalloc:True,pinned_num_register_threads:8"
	s, err := ParseConf(line)
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxSplitSizeMB != 64 || len(s.Unmodelled) != 3 || s.Unmodelled[1] != (Option{"release_lock_on_cudamalloc", "True"}) {
		t.Fatalf("parsed %+v", s)
	}
	if s.String() != line {
		t.Fatalf("String() = %q", s.String())
	}
}

// PyTorch clamps max_split_size_mb to SIZE_MAX / 1 MiB rather than refusing.
func TestParseConfClampsHugeMaxSplitSizeAsPyTorchDoes(t *testing.T) {
	s, err := ParseConf("max_split_size_mb:18446744073709551615")
	if err != nil || s.MaxSplitSizeMB != math.MaxUint64/megabyte {
		t.Fatalf("%+v %v", s, err)
	}
}

func TestDivisionsListsFollowPyTorchsParseOrder(t *testing.T) {
	cases := []struct {
		conf string
		want func(i int) uint64
		line string // String's canonical form
	}{
		{"4", func(int) uint64 { return 4 }, "4"},
		{"[256:4]", func(i int) uint64 { return map[bool]uint64{true: 4}[i <= 8] }, "[256:4]"},
		{"[>:4]", func(i int) uint64 { return map[bool]uint64{true: 4}[i >= 1] }, "[>:4]"},
		// only the first entry fills below it: interval 1 (2 MiB) stays 0
		{"[1:2,4:8,>:1]", func(i int) uint64 { return []uint64{2, 0, 8, 1}[min(i, 3)] }, "[1:2,2:0,4:8,>:1]"},
		{"[65536:2]", func(int) uint64 { return 2 }, "2"}, // beyond 32 GiB clamps to the last interval
	}
	for _, c := range cases {
		s, err := ParseConf(KeyRoundupPower2Divisions + ":" + c.conf)
		if err != nil {
			t.Fatalf("%s: %v", c.conf, err)
		}
		for i, got := range s.RoundupPower2Divisions {
			if got != c.want(i) {
				t.Fatalf("%s: interval %d has %d divisions, want %d (table %v)", c.conf, i, got, c.want(i), s.RoundupPower2Divisions)
			}
		}
		if got := s.RoundupPower2Divisions.String(); got != c.line {
			t.Fatalf("%s: String() = %q, want %q", c.conf, got, c.line)
		}
	}
}

// String must write a line that parses back to the same table, whatever
// the table.
func TestDivisionsStringParsesBackForAnyTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 0))
	for range 2000 {
		var d Divisions
		v := uint64(1) << rng.IntN(5)
		for i := range d {
			if rng.IntN(3) == 0 {
				v = []uint64{0, 1, 2, 4, 8, 16}[rng.IntN(6)]
			}
			d[i] = v
		}
		s := Settings{RoundupPower2Divisions: d}
		back, err := ParseConf(s.String())
		if err != nil || back.RoundupPower2Divisions != d {
			t.Fatalf("table %v: line %q gives %v, %v", d, s.String(), back.RoundupPower2Divisions, err)
		}
	}
}

func TestValidateRefusesWhatPyTorchRefuses(t *testing.T) {
	for _, s := range []Settings{
		{MaxSplitSizeMB: 19},
		{MaxNonSplitRoundingMB: 1},
		{GarbageCollectionThreshold: 1},
		{GarbageCollectionThreshold: math.NaN()},
		{RoundupPower2Divisions: Divisions{3}},
	} {
		if err := s.Validate(); !errors.Is(err, ErrConfValue) {
			t.Errorf("%+v: %v", s, err)
		}
		if _, err := Replay(nil, Config{Settings: s}); !errors.Is(err, ErrConfValue) {
			t.Errorf("Replay with %+v: %v", s, err)
		}
	}
}

// The dict memory_snapshot.cpp writes, as the unpickler decodes it.
func TestSettingsFromSnapshotReadsAllocatorSettings(t *testing.T) {
	roundup := map[string]any{}
	for i := range DivisionIntervals {
		roundup[big.NewInt(1<<i).String()] = int64(0)
	}
	recorded := map[string]any{
		SnapshotConf:                    "",
		SnapshotMaxSplitSize:            int64(-1),
		SnapshotGCThreshold:             0.0,
		SnapshotExpandableSegments:      false,
		SnapshotRoundup:                 roundup,
		"release_lock_on_cudamalloc":    false,
		"pinned_num_register_threads":   int64(1),
		"pinned_use_cuda_host_register": false,
	}
	s, err := SettingsFromSnapshot(recorded)
	if err != nil || !s.IsDefault() {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	recorded[SnapshotConf] = "expandable_segments:True,max_split_size_mb:128,max_non_split_rounding_mb:40,garbage_collection_threshold:0.6"
	recorded[SnapshotExpandableSegments] = true
	recorded[SnapshotMaxSplitSize] = int64(128 << 20)
	recorded[SnapshotGCThreshold] = 0.6
	roundup["256"], roundup["512"] = int64(4), int64(4)
	s, err = SettingsFromSnapshot(recorded)
	if err != nil {
		t.Fatal(err)
	}
	if !s.ExpandableSegments || s.MaxSplitSizeMB != 128 || s.MaxNonSplitRoundingMB != 40 || s.GarbageCollectionThreshold != 0.6 ||
		s.RoundupPower2Divisions != (Divisions{8: 4, 9: 4}) {
		t.Fatalf("recorded %+v", s)
	}
	if s.String() != "expandable_segments:True,max_split_size_mb:128,max_non_split_rounding_mb:40,roundup_power2_divisions:[128:0,256:4,512:4],garbage_collection_threshold:0.6" {
		t.Fatalf("String() = %q", s.String())
	}
	// The typed fields are what the allocator held: they win over the line.
	recorded[SnapshotExpandableSegments] = false
	if s, _ = SettingsFromSnapshot(recorded); s.ExpandableSegments {
		t.Fatal("conf line overrode the recorded expandable_segments")
	}
	for field, v := range map[string]any{
		SnapshotMaxSplitSize:       int64(3),
		SnapshotExpandableSegments: "True",
		SnapshotRoundup:            map[string]any{"3": int64(2)},
		SnapshotConf:               "max_split_size_mb:1",
	} {
		bad := map[string]any{field: v}
		_, err := SettingsFromSnapshot(bad)
		if !errors.Is(err, ErrConfValue) || !strings.Contains(err.Error(), "allocator_settings") {
			t.Errorf("%s = %v: %v", field, v, err)
		}
	}
}
