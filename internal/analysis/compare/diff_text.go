package compare

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/internal/units"
)

// DefaultDiffSites is how many sites the text and HTML reports list before
// summing the rest in one line.
const DefaultDiffSites = 10

// signedBytesText is a delta in binary units with its sign ("+1.00 GiB",
// "-2.00 MiB", "0 B").
func signedBytesText(n int64) string {
	switch {
	case n > 0:
		return "+" + units.Bytes(uint64(n)).String()
	case n < 0:
		return "-" + units.Bytes(uint64(-n)).String()
	}
	return "0 B"
}

// WriteText writes the difference in at most DefaultTextWidth columns,
// listing DefaultDiffSites sites.
func (d *Difference) WriteText(w io.Writer) error {
	return d.WriteTextWidth(w, DefaultTextWidth, DefaultDiffSites)
}

// WriteTextWidth writes the difference in the order a user asks: what
// each run is, peak live on both sides, every reserve (PyTorch's recorded
// one, each policy's) with its difference split into live and
// cached-but-free bytes at its peak and each policy's smallest capacity,
// then the difference in peak live by allocation site, the top sites
// listed and the rest summed in one line, so the column adds up to the
// difference in peak live. width 0: no limit; sites 0: every site.
func (d *Difference) WriteTextWidth(w io.Writer, width, sites int) error {
	var b strings.Builder
	for _, s := range []struct {
		name string
		side *DiffSide
	}{{"A", &d.A}, {"B", &d.B}} {
		conf := confName(s.side.TorchConf)
		fmt.Fprintf(&b, "%s: %s, %d events; torch policy with %s (%s)\n", s.name, s.side.Trace, s.side.Events, conf, s.side.TorchSettingsFrom)
	}
	fmt.Fprintf(&b, "peak live: A %s, B %s, B − A %s (A at %s, B at %s)\n", units.Bytes(d.A.PeakLive), units.Bytes(d.B.PeakLive),
		signedBytesText(d.PeakLiveDelta), d.A.peakPlace(), d.B.peakPlace())
	b.WriteString("\n")
	t := table{width: width, groups: []tableGroup{
		{"", []string{"reserve"}},
		{"peak reserved", []string{"A", "B", "B − A"}},
		{"B − A at the peaks", []string{"live", "cached free"}},
		{"smallest capacity", []string{"A", "B", "B − A"}},
	}}
	row := func(name string, r ReserveDiff, minA, minB uint64, minD *int64) {
		cells := []string{name, units.Bytes(r.A.Reserved).String(), units.Bytes(r.B.Reserved).String(), signedBytesText(r.Delta),
			signedBytesText(r.LiveDelta), signedBytesText(r.CachedFreeDelta)}
		cells = append(cells, orDash(minA > 0, units.Bytes(minA).String()), orDash(minB > 0, units.Bytes(minB).String()))
		if minD != nil {
			cells = append(cells, signedBytesText(*minD))
		} else {
			cells = append(cells, "-")
		}
		t.add(cells...)
	}
	if r := d.Recorded; r != nil {
		row(d.Recorder+" (recorded)", *r, 0, 0, nil)
	}
	for _, p := range d.Policies {
		row(p.Name, p.Reserve, p.AMinCapacity, p.BMinCapacity, p.MinCapacityDelta)
	}
	t.write(&b)
	writeWrapped(&b, "Each reserve at its own peak: the difference splits into live bytes and cached free ones (reserved but not live: cache, rounding, fragmentation). The torch policies run each side's settings above; smallest capacity: the search of gpumem replay.", proseWidth)
	b.WriteString("\n")
	d.writeSites(&b, width, sites)
	if d.FramesError != "" {
		fmt.Fprintf(&b, "warning: stack frames not read, those allocations grouped by size: %s\n", d.FramesError)
	}
	_, err := io.WriteString(w, wrapLongLines(b.String(), width))
	return err
}

// peakPlace names where the side reached its peak live bytes.
func (s *DiffSide) peakPlace() string {
	if s.PeakEntry != nil {
		return fmt.Sprintf("device_traces entry %d", *s.PeakEntry)
	}
	return fmt.Sprintf("event %d", s.PeakEvent)
}

// writeSites writes the sites table: the first n sites (all when n is 0),
// one line for the rest, and the total, which is the difference in peak
// live.
func (d *Difference) writeSites(b *strings.Builder, width, n int) {
	how := d.siteHow()
	if !slices.ContainsFunc(d.Sites, func(s Site) bool { return s.Delta != 0 }) {
		fmt.Fprintf(b, "peak live by allocation site: every one of the %d sites (%s) holds the same bytes at both peaks, %d → %d allocations.\n",
			len(d.Sites), how, d.A.LiveAllocations, d.B.LiveAllocations)
		return
	}
	fmt.Fprintf(b, "peak live by allocation site (%s), the largest difference first:\n", how)
	shown := d.Sites
	if n > 0 && len(shown) > n {
		shown = shown[:n]
	}
	type line struct{ a, b, d, count, name string }
	lines := []line{{"A", "B", "B − A", "allocations", "site"}}
	for _, s := range shown {
		lines = append(lines, line{units.Bytes(s.ABytes).String(), units.Bytes(s.BBytes).String(), signedBytesText(s.Delta),
			fmt.Sprintf("%d → %d", s.ACount, s.BCount), s.Name()})
	}
	if rest := d.Sites[len(shown):]; len(rest) > 0 {
		var ra, rb uint64
		var rd int64
		var ca, cb int
		for _, s := range rest {
			ra, rb, rd, ca, cb = ra+s.ABytes, rb+s.BBytes, rd+s.Delta, ca+s.ACount, cb+s.BCount
		}
		lines = append(lines, line{units.Bytes(ra).String(), units.Bytes(rb).String(), signedBytesText(rd),
			fmt.Sprintf("%d → %d", ca, cb), fmt.Sprintf("the other %d sites", len(rest))})
	}
	lines = append(lines, line{units.Bytes(d.A.PeakLive).String(), units.Bytes(d.B.PeakLive).String(), signedBytesText(d.PeakLiveDelta),
		fmt.Sprintf("%d → %d", d.A.LiveAllocations, d.B.LiveAllocations), fmt.Sprintf("all %d sites: the peak live bytes", len(d.Sites))})
	var wa, wb, wd, wc int
	for _, l := range lines {
		wa, wb, wd, wc = max(wa, runeLen(l.a)), max(wb, runeLen(l.b)), max(wd, runeLen(l.d)), max(wc, runeLen(l.count))
	}
	limit := width
	if limit <= 0 {
		limit = 1 << 30
	}
	for i, l := range lines {
		if i == len(lines)-1 {
			b.WriteString(strings.Repeat("─", min(limit, wa+wb+wd+wc+12+len("all sites")+2)) + "\n")
		}
		prefix := fmt.Sprintf("%s  %s  %s  %s  ", padLeft(l.a, wa), padLeft(l.b, wb), padLeft(l.d, wd), padLeft(l.count, wc))
		indent := strings.Repeat(" ", runeLen(prefix)+2)
		for j, part := range wrapSite(l.name, limit-runeLen(indent)) {
			if j > 0 {
				prefix = indent
			}
			b.WriteString(cutLine(prefix+part, limit) + "\n")
		}
	}
}

// wrapSite breaks a site's name into lines of at most width columns
// between its frames (at " ← "), the later lines starting with the arrow;
// a frame wider than the line is cut by the caller.
func wrapSite(name string, width int) []string {
	frames := strings.Split(name, " ← ")
	var lines []string
	cur := frames[0]
	for _, f := range frames[1:] {
		if width > 0 && runeLen(cur)+len(" ← ")+runeLen(f) > width {
			lines = append(lines, cur)
			cur = "← " + f
			continue
		}
		cur += " ← " + f
	}
	return append(lines, cur)
}

// siteHow says how the sites are named.
func (d *Difference) siteHow() string {
	if d.SiteFrames == 0 {
		return "every allocation by size: no frames asked for"
	}
	return fmt.Sprintf("the user's top %d frames, innermost first; allocations without frames by size", d.SiteFrames)
}

func runeLen(s string) int { return len([]rune(s)) }

func padLeft(s string, w int) string {
	if n := runeLen(s); n < w {
		return strings.Repeat(" ", w-n) + s
	}
	return s
}
