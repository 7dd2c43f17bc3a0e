package gpumem

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/storage"
)

// checkSnapshotSums checks the snapshot's claims against the device: every
// segment's blocks tile it, the segments add up to the bytes the device
// holds from storage, and the active blocks' requested sizes to the live
// buffers.
func checkSnapshotSums(t *testing.T, d *Device, when string) *trace.TorchSnapshot {
	t.Helper()
	snap := d.torchSnapshot()
	var total, active uint64
	for _, seg := range snap.Segments {
		addr := seg.Address
		for _, b := range seg.Blocks {
			if b.Address != addr {
				t.Fatalf("%s: segment %#x: block at %#x, want %#x (blocks tile the segment)", when, seg.Address, b.Address, addr)
			}
			addr += b.Size
			if b.State == stateActive {
				active += b.RequestedSize
			}
		}
		if addr != seg.Address+seg.TotalSize {
			t.Fatalf("%s: segment %#x of %d bytes: blocks end at %#x", when, seg.Address, seg.TotalSize, addr)
		}
		total += seg.TotalSize
	}
	st := d.Stats()
	if total != st.BytesAllocated || active != st.BytesInUse {
		t.Fatalf("%s: segments %d bytes, active blocks %d; device holds %d, live buffers %d", when, total, active, st.BytesAllocated, st.BytesInUse)
	}
	return snap
}

// The snapshot of a device at any moment of a workload — growths, a
// relocation, granules unmapped, releases held back by queued work —
// draws exactly the bytes it holds and its live buffers.
func TestSnapshotSegmentsAddUpToTheDevicesBytesAtEveryMoment(t *testing.T) {
	for _, granular := range []bool{false, true} {
		t.Run(fmt.Sprintf("granular=%v", granular), func(t *testing.T) {
			d := openHost(t, WithPageGranular(granular), WithHistory(HistoryOptions{Stacks: true}))
			s0 := d.DefaultStream()
			s1, err := d.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshotSums(t, d, "empty")
			keep := mustAlloc(t, s0, 4*mib+3)
			small := mustAlloc(t, s0, 3000)
			other := mustAlloc(t, s1, 5*mib)
			checkSnapshotSums(t, d, "three buffers")
			big := mustAlloc(t, s0, 7*mib) // a growth
			mustFree(t, big)
			checkSnapshotSums(t, d, "after a growth")
			mustCleanup(t, d) // relocates keep, gives the outdated page back, unmaps free granules
			checkSnapshotSums(t, d, "after the cleanup")

			// Queued work holds a page's release back: the outdated page
			// the next reservation drains is gone from the pool while the
			// storage still holds it.
			x := mustAlloc(t, s1, 5*mib)
			mustFree(t, mustAlloc(t, s1, 9*mib)) // s1 grows: x's page is outdated
			mustFree(t, x)
			gate := make(chan struct{})
			if err := s1.Enqueue("wait", nil, func([]storage.Resource) error { <-gate; return nil }); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			y, err := s1.Alloc(ctx, 4096) // bounded: a relocation would wait for the gate
			cancel()
			if err == nil {
				if len(s1.st.held) == 0 {
					t.Logf("no release held (nothing drained)")
				}
				checkSnapshotSums(t, d, "with a release held")
				mustFree(t, y)
			}
			close(gate)
			if err := s1.Synchronize(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkSnapshotSums(t, d, "after the held release")
			mustFree(t, other)
			mustFree(t, small)
			snap := checkSnapshotSums(t, d, "at the end")
			var framed bool
			for _, seg := range snap.Segments {
				for _, b := range seg.Blocks {
					if b.State == stateActive && len(b.Frames) > 1 && b.Frames[0].Name == "github.com/gpumem/gpumem.mustAlloc" &&
						strings.Contains(b.Frames[1].Name, "TestSnapshotSegments") {
						framed = true // the caller of Alloc first
					}
				}
			}
			if !framed {
				t.Fatalf("the live buffer's block carries no frames from this test")
			}
			mustFree(t, keep)
			checkSnapshotSums(t, d, "all freed")
		})
	}
}

// A device's snapshot reads back through trace.ReadSnapshot to the
// history's allocations and frees (a relocation's move as a free and an
// alloc), with no prelude: every live block's address is in the trace.
func TestSnapshotReadsBackToTheHistorysEvents(t *testing.T) {
	d := openHost(t, WithHistory(HistoryOptions{}))
	s0 := d.DefaultStream()
	s1, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	a := mustAlloc(t, s0, 4*mib+3)
	b := mustAlloc(t, s1, 1*mib)
	mustFree(t, mustAlloc(t, s0, 7*mib))
	mustCleanup(t, d)
	c := mustAlloc(t, s0, 300)
	mustFree(t, b)
	h, err := d.History()
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		op     trace.Op
		size   uint64
		stream int
	}
	var want []ev
	sizes := map[BufferID]uint64{}
	moves := 0
	for _, e := range h.Entries {
		switch e.Kind {
		case HistoryAlloc:
			want = append(want, ev{trace.OpAlloc, e.Size, e.Stream})
			sizes[e.Buffer] = e.Size
		case HistoryFree:
			want = append(want, ev{trace.OpFree, e.Size, -1})
		case HistoryMove:
			moves++
			want = append(want, ev{trace.OpFree, e.Size, -1}, ev{trace.OpAlloc, e.Size, e.Stream})
		}
	}
	if moves == 0 {
		t.Fatalf("the workload should relocate")
	}
	var buf bytes.Buffer
	if err := d.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	snap, err := trace.ReadSnapshot(bytes.NewReader(buf.Bytes()), trace.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Counts.Prelude != 0 || snap.FinalReserved != d.BytesAllocated() || snap.FinalLive != d.Stats().BytesInUse {
		t.Fatalf("read back: %d prelude allocations, reserved %d, live %d; device %d held, %d live", snap.Counts.Prelude, snap.FinalReserved, snap.FinalLive, d.BytesAllocated(), d.Stats().BytesInUse)
	}
	live := map[uint64]uint64{}
	var got []ev
	for _, e := range snap.Events {
		switch e.Op {
		case trace.OpAlloc:
			live[e.ID] = e.Size
			got = append(got, ev{trace.OpAlloc, e.Size, int(snap.StreamHandles[e.Stream])})
		case trace.OpFree:
			got = append(got, ev{trace.OpFree, live[e.ID], -1})
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("read back %v\nhistory   %v", got, want)
	}
	mustFree(t, a)
	mustFree(t, c)
}

// Where python3 is present, a restricted unpickler (no globals) loads a
// device's snapshot and finds memory_viz's schema, with segment sizes adding
// up to the device's bytes.
func TestDeviceSnapshotLoadsInPythonWithMemoryVizSchema(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: the schema check runs where it is")
	}
	d := openHost(t, WithPageGranular(true), WithHistory(HistoryOptions{Stacks: true}))
	s := d.DefaultStream()
	keep := mustAlloc(t, s, 4*mib+3)
	mustFree(t, mustAlloc(t, s, 7*mib))
	mustCleanup(t, d)
	small := mustAlloc(t, s, 1000)
	path := filepath.Join(t.TempDir(), "device.pickle")
	var buf bytes.Buffer
	if err := d.WriteSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import pickle, sys
class R(pickle.Unpickler):
    def find_class(self, m, n): raise pickle.UnpicklingError("global %s.%s" % (m, n))
s = R(open(sys.argv[1], "rb")).load()
assert set(s) >= {"segments", "device_traces"}, s.keys()
total = active = 0
for seg in s["segments"]:
    for k in ("device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream", "segment_type", "blocks", "is_expandable"):
        assert k in seg, k
    assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
    addr = seg["address"]
    for b in seg["blocks"]:
        assert b["address"] == addr and b["state"] in ("active_allocated", "active_pending_free", "inactive") and isinstance(b["frames"], list)
        addr += b["size"]
        if b["state"] == "active_allocated":
            active += b["requested_size"]
    total += seg["total_size"]
actions = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "oom"}
seen = set()
for tr in s["device_traces"]:
    for e in tr:
        assert e["action"] in actions, e
        seen.add(e["action"])
        for k in ("addr", "size", "stream", "time_us", "frames"):
            assert k in e, k
        for f in e["frames"]:
            assert set(f) == {"name", "filename", "line"}
assert {"alloc", "free_completed", "segment_map", "segment_unmap"} <= seen, seen
print("ok", total, active)
`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", script, path).CombinedOutput()
	want := fmt.Sprintf("ok %d %d", d.BytesAllocated(), d.Stats().BytesInUse)
	if err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("python3: %v\n%s\nwant %q", err, out, want)
	}
	mustFree(t, keep)
	mustFree(t, small)
}
