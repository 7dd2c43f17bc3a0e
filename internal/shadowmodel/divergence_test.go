package shadowmodel

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Check reports instead of
// failing the test.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper()           {}
func (r *recorder) Error(args ...any) { r.errors = append(r.errors, fmt.Sprint(args...)) }

// checkReplays runs s, wants its first divergence at op want with a
// message containing msg, then has Check write the script out and wants
// the written script to diverge at the same op, with the same message.
func checkReplays(t *testing.T, s *Script, want int, msg string) {
	t.Helper()
	first := func(res Result) Violation {
		t.Helper()
		if len(res.Violations) == 0 {
			t.Fatalf("no divergence (%s)", res.Totals)
		}
		return res.Violations[0]
	}
	res := replay(t, s)
	v := first(res)
	if v.Op != want || v.Worker != s.Ops[want].Worker || v.Line != s.Ops[want].String() || !strings.Contains(v.Msg, msg) {
		t.Fatalf("first divergence %s; want it at op %d (%s), saying %q", v, want, s.Ops[want], msg)
	}

	rec := &recorder{TB: t}
	Check(rec, s, res, "")
	if len(rec.errors) != 1 {
		t.Fatalf("Check reported %d errors, want 1", len(rec.errors))
	}
	report := rec.errors[0]
	t.Logf("Check's report:\n%s", report)
	if head := fmt.Sprintf("first divergence at op %d (line %d of the script)", want, s.lineOf(want)); !strings.Contains(report, head) {
		t.Fatalf("Check's report does not say %q:\n%s", head, report)
	}
	m := regexp.MustCompile(`-run TestReplay -count=1 -v -script (\S+)`).FindStringSubmatch(report)
	if m == nil {
		t.Fatalf("Check's report names no script to replay:\n%s", report)
	}
	defer os.Remove(m[1])
	text, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(string(text), "\n"); lines[s.lineOf(want)-1] != s.Ops[want].String() {
		t.Fatalf("line %d of the written script is %q, want op %d: %q", s.lineOf(want), lines[s.lineOf(want)-1], want, s.Ops[want])
	}
	p, err := Parse(string(text))
	if err != nil {
		t.Fatalf("the written script: %v", err)
	}
	if again := first(replay(t, p)); again.Op != v.Op || again.Msg != v.Msg {
		t.Fatalf("the written script diverges at %s; the run at %s", again, v)
	}
}

// A wrong expectation planted in the shadow (mispredict: the harness, not
// the device) is found by the next read of that byte, reported at that
// read's op with the byte's offset, and the script Check writes out
// reproduces it.
func TestDivergenceIsReportedAtItsOpAndItsScriptReplaysIt(t *testing.T) {
	s, err := Parse(`
config name="host, 1 MiB" backend=host capacity=1048576 streams=2 workers=1 max-page=262144
w0 alloc a1 s=0 size=4096
w0 write a1 n=4096 key=7
w0 enqueue s=1 shape=xform uses=R:a1[0+1000),W:a1[2000+1000) rot=3
w0 mispredict a1 off=100
w0 sync s=1
w0 read a1
`)
	if err != nil {
		t.Fatal(err)
	}
	checkReplays(t, s, 5, "bytes differ from the shadow: 1 of 4096 bytes differ, first at 100")
}

// The same in a generated run, where other goroutines allocate, relocate
// and capture around it: right after one of w0's whole writes, the shadow
// is told a wrong byte and the buffer is read at once.
func TestDivergenceInAGeneratedRunIsReportedAtItsOp(t *testing.T) {
	cfg := ConfigFor(5) // unlimited: no allocation can be out of memory, so none is void
	s := Generate(5, cfg, Gen{Steps: 1500, Race: true})
	sizes := map[int]uint64{}
	at := -1
	var w writeOp
	for i, op := range s.Ops {
		if op.Worker != 0 {
			continue
		}
		switch a := op.act.(type) {
		case allocOp:
			sizes[a.A.Alloc] = a.Size
		case writeOp:
			if a.N == sizes[a.Ref.Alloc] && a.N > 1000 && i > len(s.Ops)/3 {
				at, w = i, a
			}
		}
		if at >= 0 {
			break
		}
	}
	if at < 0 {
		t.Fatal("w0 writes no buffer whole in the script's last two thirds")
	}
	off := w.N / 2
	s.Ops = slices.Insert(s.Ops, at+1,
		Op{Worker: 0, act: mispredictOp{A: Ref{Alloc: w.Ref.Alloc}, Off: off}},
		Op{Worker: 0, act: readOp{Ref: w.Ref}})
	checkReplays(t, s, at+2, fmt.Sprintf("bytes differ from the shadow: 1 of %d bytes differ, first at %d", w.N, off))
}
