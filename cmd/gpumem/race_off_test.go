//go:build !race

package main

// raceDetector: the test binary runs under the race detector, which slows a
// replay about 16-fold; the documentation checks, which replay whole
// snapshots and check text, run in the builds without it.
const raceDetector = false
