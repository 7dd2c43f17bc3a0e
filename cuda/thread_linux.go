//go:build linux

package cuda

import "syscall"

// threadID returns the calling goroutine's current OS thread id. It is only
// stable on a goroutine locked to its thread.
func threadID() int { return syscall.Gettid() }
