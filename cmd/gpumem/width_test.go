package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func widest(text string) (int, string) {
	w, line := 0, ""
	for _, l := range strings.Split(text, "\n") {
		if n := utf8.RuneCountInString(l); n > w {
			w, line = n, l
		}
	}
	return w, line
}

// The default text fits a 120-column terminal (the replay's tables were
// 150 to 300 columns wide): column groups stack beside the policy, prose
// wraps; -wide keeps one row of groups. Every figure is still there.
func TestDefaultTextFits120Columns(t *testing.T) {
	runs := [][]string{
		{"replay", "-quiet"},
		{"replay", "-quiet", "-capacity", "4GiB", "-overhead", "100MiB"},
	}
	for _, name := range []string{"unet-snapshot.pickle", "transformer-ctx128-forward.pickle"} {
		if p := filepath.Join(sharedTraces, name); fileExists(p) {
			runs = append(runs, []string{"replay", "-quiet", "-capacity", "80GiB", p}, []string{"advise", "-quiet", "-capacity", "80GiB", p})
		}
	}
	// A snapshot with data for three devices: three reports under their
	// headings.
	if p := filepath.Join(sharedTraces, "gcn-three-devices-expandable-oom.pickle"); fileExists(p) {
		runs = append(runs, []string{"replay", "-quiet", "-no-search", "-capacity", "80GiB", p})
	}
	for _, args := range runs {
		out := mustRun(t, args...)
		if w, line := widest(out); w > 120 {
			t.Errorf("%v: a line of %d columns:\n%s", args, w, line)
		}
		wide := mustRun(t, append(args, "-wide")...)
		if w, _ := widest(wide); w <= 120 {
			t.Errorf("%v -wide: widest line %d columns, want the one-row layout", args, w)
		}
		// The same figures, only laid out otherwise.
		if a, b := strings.Fields(out), strings.Fields(wide); len(a) < len(b)*9/10 {
			t.Errorf("%v: %d words stacked, %d wide: figures lost", args, len(a), len(b))
		}
		for _, f := range strings.Fields(wide) {
			if strings.Contains(f, "─") {
				continue // rules are as long as their groups
			}
			if _, err := os.Stat(f); err == nil {
				continue
			}
			if !strings.Contains(out, f) {
				t.Errorf("%v: %q of the wide report is missing from the stacked one", args, f)
				break
			}
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
