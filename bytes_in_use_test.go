package gpumem

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumem/gpumem/storage"
)

// Issue 25 item 2: BytesInUse is the requested bytes of buffers the user
// has not freed, whichever stream holds the release back. A buffer of s0
// freed while an op on s1 still uses it leaves BytesInUse at Free, as it
// does when the op is on s0; its bytes stay reserved until the op is done.
// The snapshot's active blocks, the report and a failed Alloc's history
// entry give the same figure.
func TestBytesInUseDropsAtFreeWhicheverStreamsOpStillUsesTheBuffer(t *testing.T) {
	for _, on := range []string{"owner", "other"} {
		t.Run("op on the "+on+" stream", func(t *testing.T) {
			d, s0, s1 := twoStreams(t, WithCapacity(64*mib), WithHistory(HistoryOptions{}))
			user := s0
			if on == "other" {
				user = s1
			}
			b := mustAlloc(t, s0, 1000)
			gate, release := newGate(t)
			if err := user.Enqueue("block", []Use{{Buffer: b, Access: Write}}, func([]storage.Resource) error { <-gate; return nil }); err != nil {
				t.Fatal(err)
			}
			before := d.Stats()
			if before.BytesInUse != 1000 {
				t.Fatalf("BytesInUse before Free = %d, want 1000", before.BytesInUse)
			}
			mustFree(t, b)
			st := d.Stats()
			if st.BytesInUse != 0 {
				t.Fatalf("BytesInUse after Free with the op gated = %d, want 0 (the user freed the buffer)", st.BytesInUse)
			}
			if st.BytesReserved != before.BytesReserved || st.BytesAllocated != before.BytesAllocated {
				t.Fatalf("after Free: reserved %d, allocated %d; before %d, %d (the pages still hold the slice)",
					st.BytesReserved, st.BytesAllocated, before.BytesReserved, before.BytesAllocated)
			}
			snap := checkSnapshotSums(t, d, "while the op is gated")
			var pendingBlocks uint64
			for _, seg := range snap.Segments {
				for _, blk := range seg.Blocks {
					if blk.State == statePending {
						pendingBlocks += blk.Size
					}
				}
			}
			wantPending := uint64(0)
			if on == "other" {
				wantPending = pendingBlocks
				if pendingBlocks < 1000 {
					t.Fatalf("active_pending_free blocks hold %d bytes, want the freed buffer's slice (≥ 1000)", pendingBlocks)
				}
			}
			if st.BytesPendingFree != wantPending || pendingBlocks != wantPending {
				t.Fatalf("BytesPendingFree = %d, active_pending_free blocks %d bytes; want %d", st.BytesPendingFree, pendingBlocks, wantPending)
			}
			if u := d.Report().Usage(); u.BytesInUse != st.BytesInUse || u.BytesPendingFree != st.BytesPendingFree || u.Allocations != 0 {
				t.Fatalf("report usage %+v; Stats: %d in use, %d pending free, no live allocation", u, st.BytesInUse, st.BytesPendingFree)
			}
			metric := map[string]uint64{}
			for _, m := range st.Metrics() {
				metric[m.Name] = m.Value
			}
			if metric["bytes_in_use"] != 0 || metric["bytes_pending_free"] != wantPending {
				t.Fatalf("metrics bytes_in_use %d, bytes_pending_free %d; want 0, %d", metric["bytes_in_use"], metric["bytes_pending_free"], wantPending)
			}

			// A failed Alloc records the device's in-use bytes: the same
			// figure. Bounded: its reclaim would wait for the gated op.
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_, err := s0.Alloc(ctx, 128*mib)
			cancel()
			if err == nil {
				t.Fatal("Alloc beyond the capacity succeeded")
			}
			h, herr := d.History()
			if herr != nil {
				t.Fatal(herr)
			}
			var failed *HistoryEntry
			for i := range h.Entries {
				if h.Entries[i].Kind == HistoryAllocFailed {
					failed = &h.Entries[i]
				}
			}
			if failed == nil {
				t.Fatalf("no alloc_failed entry for %v", err)
			}
			if failed.InUseBytes != 0 {
				t.Fatalf("alloc_failed entry: InUseBytes %d, want 0 as Stats says", failed.InUseBytes)
			}

			release()
			for _, s := range []*Stream{s0, s1} {
				if err := s.Synchronize(context.Background()); err != nil && !errors.Is(err, context.Canceled) {
					t.Fatal(err)
				}
			}
			st = d.Stats()
			if st.BytesInUse != 0 || st.BytesPendingFree != 0 {
				t.Fatalf("after the op ran: %d in use, %d pending free; want 0, 0", st.BytesInUse, st.BytesPendingFree)
			}
			checkSnapshotSums(t, d, "after the op ran")
		})
	}
}
