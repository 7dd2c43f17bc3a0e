package pool

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/relocation"
	"github.com/gpumem/gpumem/storage"
)

// The page hints (PL4: the free signal, maxFree, empty, firstFree, and the
// pool signal ReleaseEmpty reads) must never change what the arena does:
// two arenas run the same random operations, one with every signal forced
// up before each step (so every coalesce and release scans in full, and
// plans come from plain TryReserve calls), and their layouts and answers
// must match at every step.
type twin struct {
	a      *Arena
	st     storage.Storage
	g      *handle.ErrorGraph
	users  []*handle.Handle
	binds  []*handle.Binding
	guards []*PageGuard
	noHint bool
}

func (t *twin) raiseAll() {
	if !t.noHint {
		return
	}
	for _, p := range t.a.slots {
		if p == nil {
			continue
		}
		for _, pg := range p.pages {
			pg.changed.Raise()
		}
		p.changed.Raise()
	}
}

func (t *twin) dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cur=%d out=%v\n", t.a.current, t.a.outdated)
	for si, p := range t.a.slots {
		if p == nil {
			continue
		}
		fmt.Fprintf(&b, "slot %d size %d:\n", si, p.pageSize)
		for _, pg := range p.pages {
			fmt.Fprintf(&b, "  page %d g=%d:", pg.index, pg.guards)
			for _, s := range pg.slices {
				if s.h.IsFree() {
					// A free slice's split of its bytes between size and
					// padding is what its last owner left (coalesceFor keeps
					// an exact fit apart without merging); every rule reads
					// its effective size, so only that is compared. The
					// hints may leave such a slice unmerged where a full scan
					// keeps it apart, or the other way round (PL4's bound
					// on the slices before the freed one is conservative).
					fmt.Fprintf(&b, " F%d@%d", s.EffectiveSize(), s.Region.Offset)
					continue
				}
				fmt.Fprintf(&b, " L%d+%d@%d", s.Region.Size, s.Padding, s.Region.Offset)
			}
			fmt.Fprintf(&b, " mapped=%v\n", pg.mapped)
		}
	}
	return b.String()
}

func locStr(h *handle.Handle) string {
	if h == nil {
		return "nil"
	}
	return h.Location().String()
}

func TestPageHintsNeverChangeWhatAFullScanWouldDo(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		granular := rapid.Bool().Draw(rt, "granular")
		budget := rapid.SampledFrom([]uint64{0, 24 << 20, 40 << 20}).Draw(rt, "budget")
		mk := func(noHint bool) *twin {
			var st storage.Storage
			var b *storage.Budget
			if budget > 0 {
				b = storage.NewBudget(budget)
			}
			if granular {
				st = hoststorage.NewGranularSim(32, 1<<20, b)
			} else {
				st = hoststorage.NewSim(32, b)
			}
			return &twin{a: NewArena(PageSizing{Min: 2 << 20, Max: 64 << 20, Align: 32}, Limits{}, nil), st: st, g: handle.NewErrorGraph(), noHint: noHint}
		}
		A, B := mk(false), mk(true)
		both := func(f func(t *twin) string) {
			B.raiseAll()
			ra, rb := f(A), f(B)
			if ra != rb {
				rt.Fatalf("diverged: hinted %q, unhinted %q\nA:\n%s\nB:\n%s", ra, rb, A.dump(), B.dump())
			}
			A.a.Check()
			B.a.Check()
			if da, db := A.dump(), B.dump(); da != db {
				rt.Fatalf("layouts diverged\nA:\n%s\nB:\n%s", da, db)
			}
		}
		sizeGen := rapid.OneOf(rapid.Uint64Range(1, 256<<10), rapid.Uint64Range(1, 20<<20))
		rt.Repeat(map[string]func(*rapid.T){
			"reserve": func(rt *rapid.T) {
				size := sizeGen.Draw(rt, "size")
				bind := rapid.Bool().Draw(rt, "bind")
				both(func(t *twin) string {
					h, err := t.a.Reserve(t.st, size, t.g, Bind{})
					if err != nil {
						return "err"
					}
					s := t.a.sliceAt(h.Location())
					r := fmt.Sprintf("%v %+v", h.Location(), s.Region.Offset)
					if bind {
						u := handle.New(handle.Uninit)
						s.Rebind(u, 7, t.g)
						h.Release()
						h = u
					}
					t.users = append(t.users, h)
					return r
				})
			},
			"tryReserve": func(rt *rapid.T) {
				size := sizeGen.Draw(rt, "size")
				both(func(t *twin) string {
					h := t.a.TryReserve(t.st, size, t.g, Bind{})
					if h != nil {
						t.users = append(t.users, h)
					}
					return locStr(h)
				})
			},
			"free": func(rt *rapid.T) {
				if len(A.users) == 0 {
					rt.Skip("none")
				}
				i := rapid.IntRange(0, len(A.users)-1).Draw(rt, "i")
				both(func(t *twin) string {
					t.users[i].Release()
					t.users = append(t.users[:i], t.users[i+1:]...)
					return ""
				})
			},
			"bind": func(rt *rapid.T) {
				if len(A.users) == 0 {
					rt.Skip("none")
				}
				i := rapid.IntRange(0, len(A.users)-1).Draw(rt, "i")
				both(func(t *twin) string {
					t.binds = append(t.binds, t.users[i].Binding())
					return ""
				})
			},
			"unbind": func(rt *rapid.T) {
				if len(A.binds) == 0 {
					rt.Skip("none")
				}
				i := rapid.IntRange(0, len(A.binds)-1).Draw(rt, "i")
				both(func(t *twin) string {
					t.binds[i].Release()
					t.binds = append(t.binds[:i], t.binds[i+1:]...)
					return ""
				})
			},
			"guard": func(rt *rapid.T) {
				var locs []handle.Location
				for si, p := range A.a.slots {
					if p == nil {
						continue
					}
					for pi := range p.pages {
						locs = append(locs, handle.MustLocation(uint8(ArenaFirstIndex+si), pi, 0))
					}
				}
				if len(locs) == 0 {
					rt.Skip("none")
				}
				l := rapid.SampledFrom(locs).Draw(rt, "loc")
				both(func(t *twin) string {
					g, ok := t.a.Pool(l.Pool()).Guard(l)
					if !ok {
						return "no"
					}
					t.guards = append(t.guards, g)
					return ""
				})
			},
			"unguard": func(rt *rapid.T) {
				if len(A.guards) == 0 {
					rt.Skip("none")
				}
				i := rapid.IntRange(0, len(A.guards)-1).Draw(rt, "i")
				both(func(t *twin) string {
					t.guards[i].Release()
					t.guards = append(t.guards[:i], t.guards[i+1:]...)
					return ""
				})
			},
			"cleanup": func(rt *rapid.T) {
				kind := rapid.SampledFrom([]CleanupKind{Periodic, Explicit}).Draw(rt, "kind")
				both(func(t *twin) string {
					p, b := t.a.Cleanup(t.st, 0, kind, t.g)
					return fmt.Sprint(p, b)
				})
			},
			"unmap": func(rt *rapid.T) {
				both(func(t *twin) string { return fmt.Sprint(t.a.UnmapFree(t.st)) })
			},
			"relocate": func(rt *rapid.T) {
				room := rapid.SampledFrom([]relocation.TargetRoom{relocation.Held, relocation.MayAllocate}).Draw(rt, "room")
				commit := rapid.Bool().Draw(rt, "commit")
				both(func(t *twin) string {
					var plan *relocation.Relocation
					if t.noHint {
						plan = refPlan(t.a, room, t.st, t.g)
					} else {
						plan = t.a.Plan(room, t.st, t.g)
					}
					var out []string
					for _, m := range plan.Moves() {
						out = append(out, fmt.Sprintf("%v->%v", m.Allocation().Location(), m.Target().Location()))
					}
					if !commit || plan.IsEmpty() {
						plan.Abandon()
						return "abandon " + strings.Join(out, ",")
					}
					l, err := plan.Copy(t.st, relocation.HostCopies{})
					if err != nil {
						return "copyerr"
					}
					p, b := t.a.Commit(l, t.st, t.g)
					return fmt.Sprint(strings.Join(out, ","), p, b)
				})
			},
		})
	})
}

// refPlan is Plan with every target found by Sliced.TryReserve (then Alloc).
func refPlan(a *Arena, room relocation.TargetRoom, st storage.Storage, g *handle.ErrorGraph) *relocation.Relocation {
	var candidates []planPage
	for _, slot := range a.outdated {
		for _, pg := range a.slots[slot].pages {
			if c, ok := analyse(pg); ok {
				candidates = append(candidates, c)
			}
		}
	}
	// stable sort by live
	for i := 1; i < len(candidates); i++ {
		for j := i; j > 0 && candidates[j].live < candidates[j-1].live; j-- {
			candidates[j], candidates[j-1] = candidates[j-1], candidates[j]
		}
	}
	cur := a.Current()
	var moves []relocation.Move
	for _, c := range candidates {
		mark := len(moves)
		ok := true
		for _, h := range c.allocs {
			src := a.sliceAt(h.Location())
			target := cur.TryReserve(st, src.Region.Size, g, Bind{})
			if target == nil && room == relocation.MayAllocate {
				target, _ = cur.Alloc(st, src.Region.Size)
			}
			if target == nil {
				ok = false
				break
			}
			dst := cur.Slice(target.Location())
			moves = append(moves, relocation.NewMove(h, target, relocation.StorageCopy{Source: src.Region, Target: dst.Region}))
		}
		if ok {
			continue
		}
		for _, m := range moves[mark:] {
			m.Target().Release()
			m.Allocation().Release()
		}
		for _, h := range c.allocs[len(moves)-mark:] {
			h.Release()
		}
		moves = moves[:mark]
	}
	return relocation.New(moves)
}
