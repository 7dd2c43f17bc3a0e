package backendkit

import (
	"sync"

	"github.com/gpumem/gpumem/storage"
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
