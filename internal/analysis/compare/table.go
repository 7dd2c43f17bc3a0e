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
	// width, when set, is the widest a line may be: a wider table is
	// written as several, each repeating the leading untitled groups (the
	// policy) beside as many titled groups as fit, in order. A single
	// group wider than width is written whole.
	width int
}

// tableGroup heads Columns consecutive columns (Title "" for none).
type tableGroup struct {
	Title   string
	Columns []string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(b *strings.Builder) {
	if t.width <= 0 {
		t.writeAll(b)
		return
	}
	var whole strings.Builder
	t.writeAll(&whole)
	if tableWidth(whole.String()) <= t.width {
		b.WriteString(whole.String())
		return
	}
	// The leading untitled groups name the rows; the rest is packed.
	lead := 0
	for lead < len(t.groups) && t.groups[lead].Title == "" {
		lead++
	}
	leadCols := 0
	for _, g := range t.groups[:lead] {
		leadCols += len(g.Columns)
	}
	// A titled group too wide beside the leading columns is cut into
	// parts of as many of its columns as fit, each under its title.
	var split table
	split = *t
	split.groups = append([]tableGroup(nil), t.groups[:lead]...)
	split.width = 0
	for g := lead; g < len(t.groups); g++ {
		grp := t.groups[g]
		var out strings.Builder
		single := &table{left: t.left, groups: append(append([]tableGroup(nil), t.groups[:lead]...), grp), rows: t.subRows(lead, leadCols, []int{g})}
		single.writeAll(&out)
		if tableWidth(out.String()) <= t.width || len(grp.Columns) == 1 {
			split.groups = append(split.groups, grp)
			continue
		}
		first := leadCols // the group's first column
		for _, g2 := range t.groups[lead:g] {
			first += len(g2.Columns)
		}
		part, partFrom := tableGroup{Title: grp.Title}, first
		for i, col := range grp.Columns {
			try := tableGroup{Title: part.Title, Columns: append(append([]string(nil), part.Columns...), col)}
			trial := &table{left: t.left, groups: append(append([]tableGroup(nil), t.groups[:lead]...), try)}
			for _, r := range t.rows {
				row := make([]string, 0, leadCols+len(try.Columns))
				for c := 0; c < leadCols; c++ {
					row = append(row, cellAt(r, c))
				}
				for c := partFrom; c <= first+i; c++ {
					row = append(row, cellAt(r, c))
				}
				trial.rows = append(trial.rows, row)
			}
			var o strings.Builder
			trial.writeAll(&o)
			if len(part.Columns) > 0 && tableWidth(o.String()) > t.width {
				split.groups = append(split.groups, part)
				part, partFrom = tableGroup{Title: grp.Title + " (cont.)"}, first+i
			}
			part.Columns = append(part.Columns, col)
		}
		split.groups = append(split.groups, part)
	}
	if len(split.groups) != len(t.groups) {
		// Cells follow their columns: the rows are unchanged, column by
		// column, so the split table keeps t's rows.
		t = &split
	}
	chunks := [][]int{} // indices of the titled groups of each sub-table
	for g := lead; g < len(t.groups); g++ {
		if n := len(chunks); n > 0 {
			try := append(append([]int(nil), chunks[n-1]...), g)
			var out strings.Builder
			t.sub(lead, leadCols, try).writeAll(&out)
			if tableWidth(out.String()) <= t.width {
				chunks[n-1] = try
				continue
			}
		}
		chunks = append(chunks, []int{g})
	}
	for i, ch := range chunks {
		if i > 0 {
			b.WriteString("\n")
		}
		t.sub(lead, leadCols, ch).writeAll(b)
	}
}

// sub is the table of the leading groups and the titled groups gs.
func (t *table) sub(lead, leadCols int, gs []int) *table {
	s := &table{left: t.left, groups: append([]tableGroup(nil), t.groups[:lead]...)}
	for _, g := range gs {
		s.groups = append(s.groups, t.groups[g])
	}
	s.rows = t.subRows(lead, leadCols, gs)
	return s
}

// subRows are the rows' cells of the leading columns and the groups gs.
func (t *table) subRows(lead, leadCols int, gs []int) [][]string {
	var rows [][]string
	var cols [][2]int // [from, to) column ranges of gs
	at := leadCols
	starts := make([]int, len(t.groups))
	for g := lead; g < len(t.groups); g++ {
		starts[g] = at
		at += len(t.groups[g].Columns)
	}
	for _, g := range gs {
		cols = append(cols, [2]int{starts[g], starts[g] + len(t.groups[g].Columns)})
	}
	for _, r := range t.rows {
		row := append([]string(nil), r[:min(leadCols, len(r))]...)
		for len(row) < leadCols {
			row = append(row, "")
		}
		for _, c := range cols {
			for i := c[0]; i < c[1]; i++ {
				cell := ""
				if i < len(r) {
					cell = r[i]
				}
				row = append(row, cell)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// cellAt is row r's cell of column c, "" past its end.
func cellAt(r []string, c int) string {
	if c < len(r) {
		return r[c]
	}
	return ""
}

// tableWidth is the widest line of text, in runes.
func tableWidth(text string) int {
	w := 0
	for _, l := range strings.Split(text, "\n") {
		w = max(w, utf8.RuneCountInString(l))
	}
	return w
}

// writeAll writes the table whole, however wide.
func (t *table) writeAll(b *strings.Builder) {
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

// wrapLongLines wraps, between words, every line of text longer than width
// that is prose: a line with no run of two spaces inside it (table rows
// have them between columns, and are already at most width wide unless a
// single group is wider). Continuation lines keep the line's indent plus
// two spaces. width 0 changes nothing.
func wrapLongLines(text string, width int) string {
	if width <= 0 {
		return text
	}
	var b strings.Builder
	lines := strings.SplitAfter(text, "\n")
	for _, l := range lines {
		body := strings.TrimRight(l, "\n")
		indent := len(body) - len(strings.TrimLeft(body, " "))
		if utf8.RuneCountInString(body) <= width || strings.Contains(body[indent:], "  ") || strings.Contains(body, "─") {
			b.WriteString(l)
			continue
		}
		pad := strings.Repeat(" ", indent)
		col := 0
		for i, word := range strings.Fields(body) {
			n := utf8.RuneCountInString(word)
			switch {
			case i == 0:
				b.WriteString(pad)
				col = indent
			case col+1+n > width:
				b.WriteString("\n" + pad + "  ")
				col = indent + 2
			default:
				b.WriteString(" ")
				col++
			}
			b.WriteString(word)
			col += n
		}
		if strings.HasSuffix(l, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}
