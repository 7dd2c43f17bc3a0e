package compare

import (
	"strings"
	"testing"
)

// A group heading is its title between rules, a rule on each side however
// narrow its columns are: a title as wide as its columns once drew none, so
// it read as a column heading.
func TestGroupTitlesSitBetweenRules(t *testing.T) {
	tb := table{groups: []tableGroup{
		{Title: "", Columns: []string{"policy"}},
		{Title: "a title wider than its column", Columns: []string{"x"}},
		{Title: "exactly as wide", Columns: []string{"exactly as wide", "b"}},
		{Title: "short", Columns: []string{"a much wider column heading"}},
		{Title: "no columns"},
	}}
	tb.add("adaptive", "1", "2", "3", "4")
	var b strings.Builder
	tb.write(&b)
	lines := strings.Split(b.String(), "\n")
	head := lines[0]
	if strings.Contains(head, "no columns") {
		t.Errorf("a group of no columns headed nothing, yet its title shows: %q", head)
	}
	for _, title := range []string{"a title wider than its column", "exactly as wide", "short"} {
		i := strings.Index(head, " "+title+" ")
		if i < 0 {
			t.Fatalf("title %q missing from %q", title, head)
		}
		before, after := head[:i], head[i+len(title)+2:]
		if !strings.HasSuffix(before, "─") || !strings.HasPrefix(after, "─") {
			t.Errorf("title %q not between rules in %q", title, head)
		}
	}
}
