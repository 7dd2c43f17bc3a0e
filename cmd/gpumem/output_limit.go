package main

import (
	"errors"
	"fmt"
	"io"
)

// defaultMaxOutput is -max-output's default: well above the largest trace
// synth can write (about 1.3 GB at trace.MaxSynthAllocs), so it only stops
// a runaway, and a user who wants less says so.
const defaultMaxOutput = 4 << 30

// errOutputLimit is the error for an output that would pass -max-output.
var errOutputLimit = errors.New("output limit reached")

// cappedWriter refuses a write that would take the output past limit
// bytes; nothing of that write reaches w, so the file holds whole lines
// (and writeFile removes it).
type cappedWriter struct {
	w       io.Writer
	limit   uint64
	written uint64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if c.written+uint64(len(p)) > c.limit {
		return 0, fmt.Errorf("%w: the output would pass -max-output %s (%d bytes); raise -max-output or lower -allocs", errOutputLimit, (&sizeFlag{v: c.limit}).String(), c.limit)
	}
	n, err := c.w.Write(p)
	c.written += uint64(n)
	return n, err
}
