package compare

import (
	"strings"

	"github.com/gpumem/gpumem/internal/units"
)

// slowPathGroups are the slow-path table's column groups: at each
// policy's smallest capacity, and at the capacity asked about when one
// was. Relocations at the smallest capacity are in the main table already.
func (c *Comparison) slowPathGroups() []tableGroup {
	groups := []tableGroup{
		{"", []string{"policy"}},
		{"smallest capacity", []string{"retries", "cudaMalloc", "cudaFree"}},
	}
	if c.Capacity > 0 {
		groups = append(groups, tableGroup{"at " + units.Bytes(c.Capacity).String(), []string{"retries", "cudaMalloc", "cudaFree", "relocations", "moved"}})
	}
	return groups
}

// slowPathRows are the slow-path table's rows, "-" where a policy does not
// measure a figure or the run did not happen; none when no policy has a
// slow path (no search and no capacity).
func (c *Comparison) slowPathRows() [][]string {
	var rows [][]string
	measured := false
	for _, p := range c.Policies {
		row := append([]string{p.Name}, slowPathCells(p.MinCapacitySlowPath)[:3]...)
		measured = measured || p.MinCapacitySlowPath != nil
		if c.Capacity > 0 {
			var s *SlowPath
			if p.Verdict != nil {
				s = p.Verdict.SlowPath
			}
			measured = measured || s != nil
			row = append(row, slowPathCells(s)...)
		}
		rows = append(rows, row)
	}
	if !measured {
		return nil
	}
	return rows
}

// slowPathNote says what the slow-path columns count.
const slowPathNote = "retries: allocations that released cached memory and tried again (PyTorch's num_alloc_retries, gpumem's cleanups); cudaMalloc, cudaFree: the PyTorch model's num_device_alloc and num_device_free (page maps and unmaps with expandable segments); at a capacity that does not fit, counted up to the out of memory."

// writeSlowPath writes what fitting cost each policy: its retries, its
// cudaMalloc and cudaFree calls (PyTorch) and relocations (gpumem), at the
// smallest capacity and at the capacity asked about.
func (c *Comparison) writeSlowPath(b *strings.Builder, width int) {
	rows := c.slowPathRows()
	if rows == nil {
		return
	}
	b.WriteString("\nthe slow path, what fitting cost:\n")
	t := table{groups: c.slowPathGroups(), rows: rows, width: width}
	t.write(b)
	writeWrapped(b, slowPathNote, proseWidth)
}

// slowPathHTML is the slow-path table for the HTML report.
func (c *Comparison) slowPathHTML() htmlTable {
	var t htmlTable
	for _, g := range c.slowPathGroups() {
		t.Groups = append(t.Groups, htmlGroup{g.Title, len(g.Columns)})
		t.Columns = append(t.Columns, g.Columns...)
	}
	t.Rows = c.slowPathRows()
	return t
}
