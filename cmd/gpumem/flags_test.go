package main

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// A bad flag or value says what is wrong and where the flags are, in a
// line or two, not the whole usage; nothing reaches stderr beyond it.
func TestBadFlagPointsToHelpWithoutTheWholeUsage(t *testing.T) {
	for _, args := range [][]string{
		{"replay", "-nosuch"},
		{"replay", "-capacity", "lots"},
		{"advise", "-bogus", "x.pickle"},
		{"synth", "-allocs", "many"},
	} {
		out, errOut, err := runCmd(t, args...)
		if !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, `run "gpumem `+args[0]+` -h" for its flags`) || strings.Contains(msg, "flags:") || strings.Count(msg, "\n") > 2 {
			t.Errorf("%v: message %q, want the problem and one line pointing to -h", args, msg)
		}
		if out != "" || errOut != "" {
			t.Errorf("%v: printed %q / %q besides the error", args, out, errOut)
		}
	}
}

// Flags that contradict each other, or two outputs on standard output, are
// usage errors (exit 2) before any work.
func TestConflictingOutputFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"replay", "-json", "-format", "text"},
		{"replay", "-html", "-", "-json"},
		{"replay", "-html", "-", "-format", "text"},
		{"replay", "-snapshot-out", "-"},
		{"advise", "-json", "-format", "text", "x.pickle"},
		{"advise", "-html", "-", "-json", "x.pickle"},
	} {
		_, _, err := runCmd(t, args...)
		if !errors.Is(err, errUsage) || exitCode(err) != 2 {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	// Agreeing flags pass: -json with -format json.
	out := mustRun(t, "replay", "-quiet", "-no-search", "-policies", "adaptive", "-json", "-format", "json")
	if !strings.HasPrefix(strings.TrimSpace(out), "{") {
		t.Fatalf("-json -format json printed %.60q", out)
	}
}

// An output that cannot be written is refused before the replay runs: no
// report is printed, and the message names the flag.
func TestUnwritableOutputIsRefusedBeforeTheReplay(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ flag, path string }{
		{"-html", filepath.Join(dir, "no-such-folder", "r.html")},
		{"-snapshot-out", filepath.Join(dir, "missing", "s.pickle")},
		{"-html", dir},
	} {
		out, _, err := runCmd(t, "replay", "-quiet", "-no-search", c.flag, c.path)
		if err == nil || !strings.Contains(err.Error(), c.flag) || out != "" {
			t.Errorf("%s %s: %v, printed %d bytes; want a refusal naming %s before any report", c.flag, c.path, err, len(out), c.flag)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Fatalf("the check left files behind: %v %v", entries, err)
	}
	_, _, err = runCmd(t, "advise", "-quiet", "-html", filepath.Join(dir, "nope", "a.html"), "x.pickle")
	if err == nil || !strings.Contains(err.Error(), "-html") {
		t.Fatalf("advise: %v, want -html refused before the snapshot is read", err)
	}
}

// gpumem version prints the module version, Go version and platform from
// the build info; a commit, when recorded, comes with its time.
func TestVersionPrintsTheBuildInfo(t *testing.T) {
	out := mustRun(t, "version")
	if !strings.HasPrefix(out, "gpumem ") || !strings.Contains(out, runtime.Version()) || !strings.Contains(out, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Fatalf("version printed %q", out)
	}
	info := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-01T20:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	if got, want := versionLine(info, true), "gpumem v1.2.3 (commit 0123456789ab of 2026-12-01T20:00:00Z, with uncommitted changes) go1.99 "+runtime.GOOS+"/"+runtime.GOARCH; got != want {
		t.Fatalf("versionLine = %q, want %q", got, want)
	}
	if _, _, err := runCmd(t, "version", "extra"); !errors.Is(err, errUsage) {
		t.Fatalf("version extra: %v, want a usage error", err)
	}
	if h := mustRun(t, "help", "version"); !strings.HasPrefix(h, "usage: gpumem version") {
		t.Fatalf("help version printed %q", h)
	}
}
