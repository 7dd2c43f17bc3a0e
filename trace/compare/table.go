package compare

import (
	"strings"
	"unicode/utf8"
)

// table is a text table whose columns are gathered under group headings,
// so every figure says which run it comes from. The first column (the
// first left columns, when set) is left aligned, the rest right aligned.
type table struct {
	groups []tableGroup
	rows   [][]string
	left   int
}

// tableGroup heads Columns consecutive columns (Title "" for none).
type tableGroup struct {
	Title   string
	Columns []string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(b *strings.Builder) {
	var heads []string
	var groupOf []int
	for g, grp := range t.groups {
		for _, c := range grp.Columns {
			heads = append(heads, c)
			groupOf = append(groupOf, g)
		}
	}
	width := make([]int, len(heads))
	for i, h := range heads {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], utf8.RuneCountInString(c))
			}
		}
	}
	const gap = 2
	// A group's title is centred over its columns, between rules, and the
	// columns widen when the title is longer than they are.
	for g, grp := range t.groups {
		if grp.Title == "" || len(grp.Columns) == 0 {
			continue // a group of no columns has nothing to head
		}
		first, span := -1, 0
		for i := range heads {
			if groupOf[i] == g {
				if first < 0 {
					first = i
				}
				span += width[i]
			}
		}
		span += gap * (len(grp.Columns) - 1)
		// The title, a space each side and at least one rule each side.
		if need := utf8.RuneCountInString(grp.Title) + 4; need > span {
			width[first+len(grp.Columns)-1] += need - span
		}
	}
	pad := func(s string, n int, left bool) string {
		fill := strings.Repeat(" ", max(0, n-utf8.RuneCountInString(s)))
		if left {
			return s + fill
		}
		return fill + s
	}
	var line strings.Builder
	for g, grp := range t.groups {
		if len(grp.Columns) == 0 {
			continue
		}
		span := -gap
		for i := range heads {
			if groupOf[i] == g {
				span += width[i] + gap
			}
		}
		if g > 0 {
			line.WriteString(strings.Repeat(" ", gap))
		}
		if grp.Title == "" {
			line.WriteString(strings.Repeat(" ", span))
			continue
		}
		title := " " + grp.Title + " "
		rest := span - utf8.RuneCountInString(title)
		line.WriteString(strings.Repeat("─", rest/2) + title + strings.Repeat("─", rest-rest/2))
	}
	b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	writeRow := func(cells []string) {
		var l strings.Builder
		for i := range heads {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			if i > 0 {
				l.WriteString(strings.Repeat(" ", gap))
			}
			l.WriteString(pad(c, width[i], i < max(t.left, 1)))
		}
		b.WriteString(strings.TrimRight(l.String(), " ") + "\n")
	}
	writeRow(heads)
	for _, r := range t.rows {
		writeRow(r)
	}
}
