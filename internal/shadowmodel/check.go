package shadowmodel

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// Check fails t when res holds violations: it writes s to a file and
// reports the first divergence (its op index, and its line in the file),
// the goroutine's last operations, the other violations, and how to
// replay the file; a short script is printed too. rerun, when set, says
// how to generate the run again (the test's flags).
func Check(t testing.TB, s *Script, res Result, rerun string) {
	t.Helper()
	if len(res.Violations) == 0 {
		return
	}
	cfg := s.Config
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d (%s, %d streams, %d goroutines): %d violation(s)\n", s.Seed, cfg.Name, cfg.Streams, cfg.Workers, len(res.Violations))
	first := res.Violations[0]
	if first.Op >= 0 {
		fmt.Fprintf(&b, "first divergence at op %d (line %d of the script):\n", first.Op, s.lineOf(first.Op))
	} else {
		b.WriteString("first divergence, outside any operation:\n")
	}
	fmt.Fprintf(&b, "\t%s\n", first)
	if res.Recent != "" {
		fmt.Fprintf(&b, "\tlast operations of w%d:\n%s", first.Worker, res.Recent)
	}
	for _, v := range res.Violations[1:] {
		fmt.Fprintf(&b, "\t%s\n", v)
	}
	text := s.String()
	f, err := os.CreateTemp("", fmt.Sprintf("gpumem-shadow-seed%d-*.txt", s.Seed))
	if err == nil {
		_, err = f.WriteString(text)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		fmt.Fprintf(&b, "the script could not be written: %v\n", err)
	} else {
		fmt.Fprintf(&b, "script (%d operations): %s\nreplay it: go test ./internal/shadowmodel -run TestReplay -count=1 -v -script %s\n", len(s.Ops), f.Name(), f.Name())
	}
	if rerun != "" {
		fmt.Fprintf(&b, "generate it again: %s\n", rerun)
	}
	if len(s.Ops) <= 200 {
		b.WriteString(text)
	}
	t.Error(b.String())
}

// lineOf returns the line of op i in s.String().
func (s *Script) lineOf(i int) int {
	header := 4 // two comment lines, seed, config
	if len(s.Known) > 0 {
		header++
	}
	return header + i + 1
}
