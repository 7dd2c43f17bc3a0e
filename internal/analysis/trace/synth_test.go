package trace

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/default.jsonl from the generator")

// encodeWorkload renders a synthetic workload as JSONL with a header.
func encodeWorkload(t testing.TB, name string, seed uint64, p SynthParams) []byte {
	t.Helper()
	seq, err := Synth(name, seed, p)
	if err != nil {
		t.Fatalf("Synth(%q): %v", name, err)
	}
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	if err := enc.WriteHeader(Header{Source: "synth " + name, Streams: max(1, p.Streams)}); err != nil {
		t.Fatal(err)
	}
	for e := range seq {
		if err := enc.Encode(e); err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
	}
	return buf.Bytes()
}

func TestSynthIsByteIdenticalForOneSeedAndDiffersForAnother(t *testing.T) {
	for _, name := range Workloads() {
		t.Run(name, func(t *testing.T) {
			p := SynthParams{Allocs: 400, Streams: 3}
			a := encodeWorkload(t, name, 7, p)
			b := encodeWorkload(t, name, 7, p)
			c := encodeWorkload(t, name, 8, p)
			if !bytes.Equal(a, b) {
				t.Fatal("two runs with seed 7 differ")
			}
			if bytes.Equal(a, c) {
				t.Fatal("seeds 7 and 8 give the same trace")
			}
		})
	}
}

// checkBalanced decodes a workload and checks the native-format rules: IDs
// unique, every free of a live ID, everything freed at the end, times
// non-decreasing (Decode checks that), sizes within the bound.
func checkBalanced(t *testing.T, data []byte) (allocs int, peak uint64, ops map[Op]int) {
	t.Helper()
	live := map[uint64]uint64{}
	seen := map[uint64]bool{}
	ops = map[Op]int{}
	var cur uint64
	for e, err := range Decode(bytes.NewReader(data)) {
		if err != nil {
			t.Fatal(err)
		}
		ops[e.Op]++
		switch e.Op {
		case OpAlloc:
			if seen[e.ID] {
				t.Fatalf("id %d allocated twice", e.ID)
			}
			if e.Size == 0 || e.Size > MaxSize {
				t.Fatalf("id %d: size %d", e.ID, e.Size)
			}
			seen[e.ID] = true
			live[e.ID] = e.Size
			cur += e.Size
			peak = max(peak, cur)
			allocs++
		case OpFree:
			s, ok := live[e.ID]
			if !ok {
				t.Fatalf("free of id %d which is not live", e.ID)
			}
			delete(live, e.ID)
			cur -= s
		}
	}
	if len(live) != 0 {
		t.Fatalf("%d allocations never freed", len(live))
	}
	return allocs, peak, ops
}

func TestSynthWorkloadsAreBalancedAndHaveTheirShape(t *testing.T) {
	for _, name := range Workloads() {
		t.Run(name, func(t *testing.T) {
			data := encodeWorkload(t, name, 1, SynthParams{Allocs: 600, Streams: 3, LiveBytes: 256 << 20})
			allocs, peak, ops := checkBalanced(t, data)
			if allocs < 600 || allocs > 2000 {
				t.Fatalf("%d allocs for a target of 600", allocs)
			}
			switch name {
			case "capture":
				if ops[OpCapture] < 10 {
					t.Fatalf("only %d capture events", ops[OpCapture])
				}
			case "transformer", "llm-server":
				if ops[OpWindow] != 2 {
					t.Fatalf("%d window events, want an open and a close", ops[OpWindow])
				}
			case "churn":
				if peak > 256<<20+64<<20 {
					t.Fatalf("peak live %d exceeds LiveBytes plus one allocation", peak)
				}
			}
		})
	}
}

func TestSynthMultistreamUsesEveryStream(t *testing.T) {
	seq, err := Synth("multistream", 3, SynthParams{Allocs: 500, Streams: 4})
	if err != nil {
		t.Fatal(err)
	}
	used := map[int]bool{}
	for e := range seq {
		if e.Op == OpAlloc {
			used[e.Stream] = true
		}
	}
	if len(used) != 4 {
		t.Fatalf("streams used %v, want 0..3", used)
	}
}

func TestSynthGrowthSizesRiseAndEarlyAllocationsLiveLong(t *testing.T) {
	seq, _ := Synth("growth", 5, SynthParams{Allocs: 1000})
	var sizes []uint64
	allocAt := map[uint64]int{}
	freedAt := map[uint64]int{}
	i := 0
	for e := range seq {
		switch e.Op {
		case OpAlloc:
			sizes = append(sizes, e.Size)
			allocAt[e.ID] = len(sizes) - 1
		case OpFree:
			freedAt[e.ID] = len(sizes)
		}
		i++
	}
	var early, late uint64
	for _, s := range sizes[:100] {
		early += s
	}
	for _, s := range sizes[900:] {
		late += s
	}
	if late < 1000*early {
		t.Fatalf("late sizes (%d) not far above early ones (%d)", late, early)
	}
	longLived := 0
	for id, at := range allocAt {
		if at < 200 && freedAt[id] == len(sizes) {
			longLived++
		}
	}
	if longLived < 10 {
		t.Fatalf("%d early allocations live to the end, want ≥ 10", longLived)
	}
}

func TestSynthStopsWhenTheConsumerStops(t *testing.T) {
	seq, _ := Synth("churn", 1, SynthParams{})
	n := 0
	for range seq {
		n++
		if n == 10 {
			break
		}
	}
	if n != 10 {
		t.Fatalf("got %d events", n)
	}
}

func TestSynthRefusesUnknownWorkloadAndNegativeParams(t *testing.T) {
	if _, err := Synth("nope", 1, SynthParams{}); !errors.Is(err, ErrUnknownWorkload) {
		t.Fatalf("unknown workload: %v", err)
	}
	if _, err := Synth("churn", 1, SynthParams{Allocs: -1}); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("negative allocs: %v", err)
	}
}

func TestDefaultTraceIsTheGeneratorOutput(t *testing.T) {
	want := encodeWorkload(t, defaultWorkload, defaultSeed, SynthParams{Allocs: defaultAllocs})
	path := filepath.Join("testdata", "default.jsonl")
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	name, got := Default()
	if name == "" {
		t.Fatal("empty name")
	}
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, want) {
		t.Fatalf("%s is stale: regenerate with go test ./trace -run TestDefaultTrace -update", path)
	}
	if !*update && !bytes.Equal(got, want) {
		t.Fatal("embedded default trace differs from the generator")
	}
	if len(got) > 1<<20 {
		t.Fatalf("default trace is %d bytes, want < 1 MiB", len(got))
	}
	allocs, _, _ := checkBalanced(t, want)
	if allocs < 1000 {
		t.Fatalf("default trace has %d allocs", allocs)
	}
}

// A count past MaxSynthAllocs is refused before anything is generated.
func TestSynthRefusesAllocsPastTheLimit(t *testing.T) {
	if _, err := Synth("churn", 1, SynthParams{Allocs: MaxSynthAllocs + 1}); !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "MaxSynthAllocs") {
		t.Fatalf("got %v, want ErrInvalidEvent naming MaxSynthAllocs", err)
	}
}
