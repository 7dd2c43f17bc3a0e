package shadowmodel

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// roundTripConfigs are every host and Sim kind (twice), and Vulkan's
// (with and without host-visible pages).
func roundTripConfigs() []Config {
	var cs []Config
	for seed := uint64(1); seed <= 2*Kinds; seed++ {
		cs = append(cs, ConfigFor(seed))
	}
	for seed := uint64(1); seed <= 3; seed++ {
		cs = append(cs, VulkanConfigFor(seed, 1<<30, seed%2 == 0))
	}
	return cs
}

// Generated scripts written as text parse back into the identical script,
// whose text is the same again; together they use every operation the
// generator makes (and the test's own mispredict) and every fault.
func TestScriptsRoundTrip(t *testing.T) {
	seen := map[string]int{}
	faults := map[faultKind]bool{}
	for i, cfg := range roundTripConfigs() {
		g := Gen{Steps: 3000, Race: i%2 == 1}
		if i%3 == 2 {
			g.Known = []int{1, 2, 3, 4, 5, 6, 10, 12, 13, 15}
		}
		s := Generate(uint64(i+1), cfg, g)
		if i == 0 {
			s.Ops = append(s.Ops, Op{Worker: 0, act: mispredictOp{A: Ref{Alloc: 1}, Off: 7}})
		}
		text := s.String()
		p, err := Parse(text)
		if err != nil {
			t.Fatalf("%s: Parse: %v", cfg.Name, err)
		}
		if !reflect.DeepEqual(s, p) {
			for k := range min(len(s.Ops), len(p.Ops)) {
				if !reflect.DeepEqual(s.Ops[k], p.Ops[k]) {
					t.Fatalf("%s: op %d differs after the round trip:\n%#v\n%#v", cfg.Name, k, s.Ops[k], p.Ops[k])
				}
			}
			t.Fatalf("%s: the parsed script differs: %d ops, want %d; config %+v, want %+v; known %v, want %v",
				cfg.Name, len(p.Ops), len(s.Ops), p.Config, s.Config, p.Known, s.Known)
		}
		if again := p.String(); again != text {
			t.Fatalf("%s: the parsed script's text differs from the original's", cfg.Name)
		}
		for _, op := range s.Ops {
			seen[op.act.name()]++
			if f, ok := op.act.(faultOp); ok {
				faults[f.Kind] = true
			}
		}
	}
	for _, a := range actions {
		if seen[a.name()] == 0 {
			t.Errorf("no script used %s", a.name())
		}
	}
	for k := range faultNames {
		if !faults[faultKind(k)] {
			t.Errorf("no script armed fault %s", faultNames[k])
		}
	}
	t.Logf("operations over %d scripts: %v", len(roundTripConfigs()), seen)
}

// The same seed and configuration draw the same script.
func TestGenerateIsDeterministic(t *testing.T) {
	cfg := ConfigFor(3)
	a, b := Generate(3, cfg, Gen{Steps: 2000}), Generate(3, cfg, Gen{Steps: 2000})
	if a.String() != b.String() {
		t.Fatal("two scripts of one seed differ")
	}
	if c := Generate(4, cfg, Gen{Steps: 2000}); c.String() == a.String() {
		t.Fatal("two seeds drew one script")
	}
	if a.Steps != 2000/cfg.Workers*cfg.Workers {
		t.Fatalf("Steps %d, want %d (each of %d goroutines draws %d)", a.Steps, 2000/cfg.Workers*cfg.Workers, cfg.Workers, 2000/cfg.Workers)
	}
}

func TestParseRejectsBadScripts(t *testing.T) {
	const cfg = "config name=\"t\" backend=host capacity=67108864 streams=2 workers=2 max-page=16777216\n"
	for _, c := range []struct {
		name, text string
		line       int
		want       string
	}{
		{"no config", "seed 1\n", 0, "no config line"},
		{"op before config", "w0 alloc a1 s=0 size=8\n" + cfg, 1, "before the config"},
		{"config without workers", "config backend=host capacity=1 streams=2 max-page=1\n", 1, "workers"},
		{"unknown backend", "config backend=tpu capacity=1 streams=2 workers=1 max-page=1\n", 1, "want one of host, sim, vulkan"},
		{"unknown line", cfg + "frobnicate\n", 2, "unknown line"},
		{"unknown operation", cfg + "w0 frobnicate\n", 2, "unknown operation"},
		{"goroutine out of range", cfg + "w2 alloc a1 s=0 size=8\n", 2, "want w0 to w1"},
		{"unknown argument", cfg + "w0 alloc a1 s=0 size=8 colour=red\n", 2, "unknown argument"},
		{"argument twice", cfg + "w0 alloc a1 s=0 s=1 size=8\n", 2, "twice"},
		{"flag with a value", cfg + "w0 alloc a1 s=0 size=8\nw0 read a1 map=yes\n", 3, "flag"},
		{"missing positional", cfg + "w0 alloc\n", 2, "arguments"},
		{"bad number", cfg + "w0 alloc a1 s=0 size=eight\n", 2, "size"},
		{"bad buffer name", cfg + "w0 alloc b1 s=0 size=8\n", 2, "a<n>"},
		{"bad use", cfg + "w0 alloc a1 s=0 size=8\nw0 enqueue s=0 shape=verify uses=R:a1[0,8)\n", 3, "use"},
		{"unterminated quote", "config name=\"t backend=host\n", 1, "quote"},
		{"stream out of range", cfg + "w0 alloc a1 s=2 size=8\n", 0, "stream 2"},
		{"buffer never made", cfg + "w0 free a3\n", 0, "made no a3"},
		{"buffer of another goroutine", cfg + "w0 alloc a1 s=0 size=8\nw1 free a1\n", 0, "goroutine 1 made no a1"},
		{"buffer made twice", cfg + "w0 alloc a1 s=0 size=8\nw0 alloc a1 s=0 size=8\n", 0, "made a1 before"},
		{"clone named after another allocation", cfg + "w0 alloc a1 s=0 size=8\nw0 clone a1 a2.1\n", 0, "named after its allocation"},
		{"graph never captured", cfg + "w0 launch g1\n", 0, "made no g1"},
	} {
		_, err := Parse(c.text)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Errorf("%s: Parse returned %v, want a *ParseError", c.name, err)
			continue
		}
		if pe.Line != c.line || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (line %d), want line %d and %q", c.name, err, pe.Line, c.line, c.want)
		}
	}
}
