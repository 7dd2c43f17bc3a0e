package memory

import "github.com/gpumem/gpumem/internal/pool"

// Layout calls visit with every page of every pool, pools by index (the
// dynamic memory's first, then dedicated, then persistent), pages in index
// order: what a snapshot of the memory draws (pool/layout.go). Under the
// device lock; visit must not call the manager.
func (m *Manager) Layout(visit func(pool.PageLayout)) {
	for i := 0; i < 256; i++ {
		p := m.pool(uint8(i))
		if p == nil {
			continue
		}
		if l, ok := p.(pool.Layouter); ok {
			l.Layout(visit)
		}
	}
}
