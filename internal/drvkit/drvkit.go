// Package drvkit holds the small pieces the driver backends (cuda, vulkan)
// both need the same way: the sticky poison a device fault leaves, and the
// test for a queue that is nil or a typed nil. Each was written twice.
//
// # Owns
//
// Poison and NilQueue; nothing of a driver.
//
// # Invariants
//
//   - (DK1) A Poison keeps the first error it is noted that matches
//     storage.ErrDevicePoisoned, and never changes after.
//
// # Concurrency
//
// A Poison is safe for concurrent use; its lock is a leaf (held for no
// other call).
package drvkit

import (
	"reflect"
	"sync"

	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// Poison is a backend's first sticky device fault (DK1). The zero value
// holds none.
type Poison struct {
	mu  sync.Mutex
	err error
}

// Note keeps err when it is the first error noted that matches
// storage.ErrDevicePoisoned; any other error, or nil, changes nothing.
func (p *Poison) Note(err error) {
	if err == nil || !storage.IsDevicePoisoned(err) {
		return
	}
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

// Err returns the kept fault, or nil.
func (p *Poison) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// NilQueue reports whether q is nil or a typed nil (a nil *Queue, say, in
// a fence someone built by hand).
func NilQueue(q stream.Queue) bool {
	if q == nil {
		return true
	}
	switch v := reflect.ValueOf(q); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}
