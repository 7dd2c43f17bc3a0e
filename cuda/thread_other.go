//go:build !linux

package cuda

// threadID returns -1: thread ids are not tracked here, so an executor
// cannot recognise a call from its own worker (see executor.Do).
func threadID() int { return -1 }
