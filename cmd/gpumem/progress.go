package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// isTerminal reports whether f is a character device (a terminal), so the
// progress bar is drawn only where someone watches it.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressBar draws one line on stderr once a replay has run for a while.
type progressBar struct {
	w     io.Writer
	start time.Time
	last  time.Time
	drawn bool
}

func newProgressBar(w io.Writer) *progressBar {
	return &progressBar{w: w, start: time.Now()}
}

// update redraws at most ten times a second, and only after half a second:
// short replays print nothing.
func (p *progressBar) update(policy, step string, done, total int) {
	now := time.Now()
	if now.Sub(p.start) < 500*time.Millisecond || now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last = now
	frac := 0.0
	if total > 0 {
		frac = min(1, float64(done)/float64(total))
	}
	const width = 30
	n := int(frac * width)
	fmt.Fprintf(p.w, "\r%-22s %-16s [%s%s] %3.0f%% %s", policy, step, strings.Repeat("=", n), strings.Repeat(" ", width-n), frac*100, now.Sub(p.start).Truncate(100*time.Millisecond))
	p.drawn = true
}

func (p *progressBar) done() {
	if p.drawn {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", 90))
	}
}

// progressTo returns where a command's long work reports its progress: a
// bar on stderr when it is a terminal and -quiet is off, else nowhere
// (nil); done clears the bar. replay, advise and diff share it, so the
// three show progress alike.
func progressTo(quiet bool, stderr io.Writer) (update func(policy, step string, done, total int), done func()) {
	if quiet || !isTerminal(os.Stderr) {
		return nil, func() {}
	}
	bar := newProgressBar(stderr)
	return bar.update, bar.done
}
