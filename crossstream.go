// Cross-stream notes (X2): which other streams still use an allocation.
//
// When a stream uses an allocation another stream owns, the owner's next op
// must wait for that use, and so must any third stream's use: the note is
// the user's fence. Per allocation a queue keeps one note at most (its later
// fence covers its earlier ones), and a passed note needs no wait, so every
// operation drops passed notes as it goes and forgets an allocation once
// none is left.

package gpumem

import (
	"github.com/gpumem/gpumem/internal/handle"
	"github.com/gpumem/gpumem/stream"
)

// crossStreamNotes maps an allocation to the fences of its pending uses by
// streams other than its owner. It lives under the device lock. An
// allocation with notes is keyed (handle.Descriptor.Key), so the device
// hands its descriptor to no later allocation while a note names it (H6).
type crossStreamNotes map[*handle.Descriptor][]stream.Fence

// filter keeps the notes of desc for which keep is true, forgetting desc
// when none is left.
func (n crossStreamNotes) filter(desc *handle.Descriptor, keep func(stream.Fence) bool) {
	notes := n[desc]
	if len(notes) == 0 {
		return
	}
	kept := notes[:0]
	for _, f := range notes {
		if keep(f) {
			kept = append(kept, f)
		}
	}
	clear(notes[len(kept):])
	if len(kept) == 0 {
		delete(n, desc)
		desc.Unkey()
		return
	}
	n[desc] = kept
}

func pending(f stream.Fence) bool { return f.Q.Completed() < f.Seq }

// note records that f uses desc; f replaces its queue's earlier note.
func (n crossStreamNotes) note(desc *handle.Descriptor, f stream.Fence) {
	n.filter(desc, func(x stream.Fence) bool { return x.Q != f.Q && pending(x) })
	if len(n[desc]) == 0 {
		desc.Key()
	}
	n[desc] = append(n[desc], f)
}

// pendingFor returns the notes of desc not yet passed, except those of
// queue except (nil: none excepted). It changes nothing.
func (n crossStreamNotes) pendingFor(desc *handle.Descriptor, except stream.Queue) []stream.Fence {
	var out []stream.Fence
	for _, f := range n[desc] {
		if f.Q != except && pending(f) {
			out = append(out, f)
		}
	}
	return out
}

// dropPassed forgets the passed notes of desc (every queue).
func (n crossStreamNotes) dropPassed(desc *handle.Descriptor) { n.filter(desc, pending) }

// dropPassedOf forgets q's passed notes of desc.
func (n crossStreamNotes) dropPassedOf(desc *handle.Descriptor, q stream.Queue) {
	n.filter(desc, func(f stream.Fence) bool { return f.Q != q || pending(f) })
}

// dropQueue forgets q's notes of desc up to seq (they are known passed, or
// their use ended), keeping every other queue's.
func (n crossStreamNotes) dropQueue(desc *handle.Descriptor, q stream.Queue, seq uint64) {
	n.filter(desc, func(f stream.Fence) bool { return f.Q != q || f.Seq > seq })
}
