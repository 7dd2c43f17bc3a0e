//go:build !linux

package cuda

// threadID returns -1: thread ids are not tracked here, so an Executor
// cannot recognise a call from its own worker (see Executor.Do).
func threadID() int { return -1 }
