package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// Messages speak of flags, files and settings, not Go packages: no
// "trace: ", "compare: " or "torch: " prefix reaches the user, and a bad
// torch:CONF names the setting as a usage error.
func TestMessagesCarryNoPackagePrefixes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		args []string
		want string
		exit int
	}{
		{[]string{"replay", "-policies", "torch:foo:1"}, `policy "torch:foo:1": unknown PYTORCH_CUDA_ALLOC_CONF key: foo`, 2},
		{[]string{"replay", "-policies", "nosuch"}, `unknown policy "nosuch"`, 2},
		{[]string{"replay", "-torch-conf", "bad:1"}, "unknown PYTORCH_CUDA_ALLOC_CONF key", 2},
		{[]string{"replay", write("a.jsonl", `{"op":"alloc","t":1}`+"\n")}, `line 1: invalid trace event: alloc without "id"`, 1},
		{[]string{"replay", write("e.pickle", "\x80\x02}q\x00.")}, "not a PyTorch memory snapshot: top level is an empty dict, without segments or device_traces; expected a dict with segments and device_traces", 1},
		{[]string{"replay", write("t.txt", "hello\n")}, "neither a PyTorch memory snapshot", 1},
		{[]string{"synth", "-workload", "nosuch", "-o", filepath.Join(dir, "x.jsonl")}, "unknown synthetic workload", 2},
	} {
		_, _, err := runCmd(t, c.args...)
		if err == nil || exitCode(err) != c.exit || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (exit %d), want %q, exit %d", c.args, err, exitCode(err), c.want, c.exit)
			continue
		}
		for _, prefix := range []string{"trace: ", "compare: ", "torch: "} {
			if strings.Contains(err.Error(), prefix) {
				t.Errorf("%v: %q carries the package prefix %q", c.args, err, prefix)
			}
		}
	}
}

// convert reads its input as replay does (readInput), so the same file
// gets the same message and exit status from both: before, convert read
// every file as a snapshot, and a text file gave "bad pickle: opcode 0x68
// at offset 0: memo key 101 not found" where replay said it was neither
// a snapshot nor a trace. A message about a trace never speaks of a
// snapshot (R4): a trace with NaN or deep nesting on its header line is
// named at its line, and a gzipped trace past -max-snapshot says so,
// not "invalid trace event: after line N: bad PyTorch snapshot: input
// larger than the limit".
func TestConvertAndReplayGiveTheSameMessages(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(`{"op":"cleanup","t":0,"stream":0}` + "\n"))
	zw.Write(bytes.Repeat([]byte("\n"), 64<<10))
	zw.Close()
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	event := `{"op":"alloc","t":1,"id":1,"size":8,"stream":0}` + "\n"
	for _, c := range []struct {
		name, file string
		flags      []string
		want       string // in both messages
		trace      bool   // a trace's message: no word of a snapshot
	}{
		{"text", write("notes.txt", []byte("hello\n")), nil, "neither a PyTorch memory snapshot", false},
		{"empty", write("empty.pickle", nil), nil, "empty input", false},
		{"empty trace", write("empty.jsonl", nil), nil, "empty.jsonl has no events", true},
		{"header with NaN", write("nan.jsonl", []byte(`{"format":"gpumem-trace","version":2,"x":NaN}`+"\n"+event)), nil, "line 1: not valid JSON", true},
		{"header with deep nesting", write("deep.jsonl", []byte(`{"format":"gpumem-trace","version":2,"x":`+deep+"}\n"+event)), nil, "line 1: not valid JSON", true},
		{"event with NaN", write("enan.jsonl", []byte(`{"op":"alloc","t":NaN,"id":1,"size":8,"stream":0}`+"\n")), nil, "line 1: not valid JSON", true},
		{"gzipped trace past the limit", write("nl.jsonl.gz", z.Bytes()), []string{"-max-snapshot", "10KiB"}, "gzipped gpumem trace larger than the limit of 10240 bytes once decompressed (raise -max-snapshot to read it)", true},
		{"corrupt gzip", write("bad.pickle.gz", []byte{0x1f, 0x8b, 1, 2, 3}), nil, "corrupt gzip stream", false},
		{"pickle without traces", write("e.pickle", []byte("\x80\x02}q\x00.")), nil, "not a PyTorch memory snapshot: top level is an empty dict, without segments or device_traces; expected a dict with segments and device_traces", false},
		{"missing file", filepath.Join(dir, "nope.pickle"), nil, "no such file", false},
	} {
		_, _, rerr := runCmd(t, append(append([]string{"replay", "-quiet", "-no-search"}, c.flags...), c.file)...)
		_, _, cerr := runCmd(t, append(append([]string{"convert", "-o", filepath.Join(dir, "out.jsonl")}, c.flags...), c.file)...)
		if rerr == nil || cerr == nil {
			t.Errorf("%s: replay %v, convert %v; want both refused", c.name, rerr, cerr)
			continue
		}
		if rerr.Error() != cerr.Error() || exitCode(rerr) != exitCode(cerr) {
			t.Errorf("%s: replay says %q (exit %d), convert %q (exit %d)", c.name, rerr, exitCode(rerr), cerr, exitCode(cerr))
		}
		if !strings.Contains(rerr.Error(), c.want) {
			t.Errorf("%s: %q, want it to say %q", c.name, rerr, c.want)
		}
		if c.trace && strings.Contains(strings.ReplaceAll(rerr.Error(), "-max-snapshot", ""), "snapshot") {
			t.Errorf("%s: a trace's message speaks of a snapshot: %q", c.name, rerr)
		}
		if c.trace && strings.Contains(c.want, "line 1") && !errors.Is(rerr, trace.ErrInvalidEvent) {
			t.Errorf("%s: %v, want an ErrInvalidEvent", c.name, rerr)
		}
	}
	// A gpumem trace is not converted: said as such, a usage error.
	ok := write("ok.jsonl", []byte(`{"format":"gpumem-trace","version":2}`+"\n"+event))
	if _, _, err := runCmd(t, "convert", ok, "-o", filepath.Join(dir, "again.jsonl")); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "is a gpumem trace already") {
		t.Errorf("convert of a trace: %v, want a usage error saying it is a trace already", err)
	}
}

// An output path that cannot be written is named by its flag and the path
// the user gave, with what is wrong in their terms, before any work: not
// "open adir: is a directory", nor the internal probe file the check
// creates (".gpumem-check-…"). A missing folder or a folder given for a
// file is a usage error.
func TestOutputPathErrorsNameTheFlagAndThePath(t *testing.T) {
	dir := t.TempDir()
	adir := filepath.Join(dir, "adir")
	if err := os.Mkdir(adir, 0o755); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no", "such", "dir")
	snap := filepath.Join("..", "..", "internal", "analysis", "trace", "testdata", "synthetic-p4.pickle")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"convert", snap, "-o", adir}, "-o " + adir + " is a folder: give a file name"},
		{[]string{"convert", snap, "-o", filepath.Join(missing, "t.jsonl")}, "-o " + filepath.Join(missing, "t.jsonl") + ": the folder " + missing + " does not exist"},
		{[]string{"synth", "-workload", "churn", "-o", adir}, "-o " + adir + " is a folder: give a file name"},
		{[]string{"replay", "-quiet", "-no-search", "-html", filepath.Join(missing, "r.html")}, "-html " + filepath.Join(missing, "r.html") + ": the folder " + missing + " does not exist"},
		{[]string{"replay", "-quiet", "-no-search", "-snapshot-out", filepath.Join(missing, "s.pickle")}, "-snapshot-out " + filepath.Join(missing, "s.pickle") + ": the folder " + missing + " does not exist"},
		{[]string{"advise", "-quiet", "-html", filepath.Join(missing, "a.html"), snap}, "-html " + filepath.Join(missing, "a.html") + ": the folder " + missing + " does not exist"},
	} {
		out, _, err := runCmd(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err) != 2 || strings.Contains(err.Error(), "gpumem-check") || out != "" {
			t.Errorf("%v: %v (exit %d), printed %d bytes; want %q, exit 2, before any output", c.args, err, exitCode(err), len(out), c.want)
		}
	}
	if entries, err := os.ReadDir(adir); err != nil || len(entries) != 0 {
		t.Fatalf("the checks left files behind: %v %v", entries, err)
	}
	// A file that exists but cannot be created over (here: a folder made
	// read-only with a file in it) names the flag and says why.
	if os.Getuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		_, _, err := runCmd(t, "convert", snap, "-o", filepath.Join(ro, "t.jsonl"))
		if err == nil || !strings.Contains(err.Error(), "-o "+filepath.Join(ro, "t.jsonl")+" cannot be written: permission denied") || strings.Contains(err.Error(), "gpumem-check") {
			t.Errorf("a read-only folder: %v", err)
		}
	}
}
