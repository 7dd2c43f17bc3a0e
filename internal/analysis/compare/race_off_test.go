//go:build !race

package compare

// raceDetector: the test binary runs under the race detector, which slows a
// replay about 16-fold.
const raceDetector = false
