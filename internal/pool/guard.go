package pool

import "github.com/gpumem/gpumem/internal/handle"

// PageGuard freezes one page (sliced pools) or one allocation (exclusive,
// direct and persistent pools): nothing new is carved from it, it is never
// released, and relocation leaves it in place. A sealed graph holds one per
// page it touched. Release is idempotent and runs under the device lock.
type PageGuard struct {
	page    *page           // page guards
	binding *handle.Binding // allocation guards
	done    bool
	after   func()
}

// IsPageGuard reports whether the guard holds a whole sliced page (rather
// than one allocation).
func (g *PageGuard) IsPageGuard() bool { return g.page != nil }

// OnRelease runs fn once, when the guard is released (for counters).
func (g *PageGuard) OnRelease(fn func()) { g.after = fn }

func newPageGuard(p *page) *PageGuard {
	p.guards++
	return &PageGuard{page: p}
}

func newAllocationGuard(b *handle.Binding) *PageGuard { return &PageGuard{binding: b} }

// Release drops the guard; later calls do nothing.
func (g *PageGuard) Release() {
	if g == nil || g.done {
		return
	}
	g.done = true
	if g.page != nil {
		if g.page.guards <= 0 {
			panic("pool: page guard counter below zero")
		}
		g.page.guards--
		// An unguarded page may go at the next cleanup: make it look.
		g.page.changed.Raise()
	}
	if g.binding != nil {
		g.binding.Release()
	}
	if g.after != nil {
		g.after()
	}
}
