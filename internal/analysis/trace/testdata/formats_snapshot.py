# Writes the snapshot fixtures of snapshot_formats_test.go: one small
# pickle per shape memory_viz reads and per way a file spreads its data
# over devices, each modelled on a real one (../shared/notes/
# pytorch-snapshots-in-the-wild.md). Run from this directory:
#   python3 formats_snapshot.py
import pickle

MiB = 1 << 20
frame = {"name": "forward", "filename": "model.py", "line": 7}


def write(name, value):
    with open(name, "wb") as f:
        pickle.dump(value, f, protocol=4)


def hist(addr, real_size):
    return {"addr": addr, "real_size": real_size, "frames": [frame]}


# PyTorch 2.0: blocks carry size, state and history (newest first), no
# address; an inactive block's requested_size is left over from an earlier
# use (here larger than the block).
S0, S1 = 0x7F0000000000, 0x7F0001400000
pytorch20 = {
    "segments": [
        {"device": 0, "address": S0, "total_size": 20 * MiB, "allocated_size": 0, "active_size": 0,
         "requested_size": 0, "stream": 0, "segment_type": "large",
         "blocks": [
             # S0: live from before the trace, request in its history.
             {"size": 2 * MiB, "requested_size": 1500000, "state": "active_allocated",
              "history": [hist(S0, 1500000)]},
             # S0 + 2 MiB: freed in the trace; stale requested_size.
             {"size": 4 * MiB, "requested_size": 16 * MiB, "state": "inactive",
              "history": [hist(S0 + 2 * MiB, 1 * MiB), hist(S0 + 3 * MiB, 3 * MiB)]},
             # S0 + 6 MiB: allocated in the trace (no requested_size: the
             # history has the request).
             {"size": 6 * MiB, "state": "active_allocated", "history": [hist(S0 + 6 * MiB, 6000000)]},
             {"size": 8 * MiB, "requested_size": 0, "state": "inactive"},
         ]},
        {"device": 0, "address": S1, "total_size": 2 * MiB, "allocated_size": 0, "active_size": 0,
         "requested_size": 0, "stream": 0, "segment_type": "small",
         "blocks": [
             # S1: live, its free requested but not completed at the dump.
             {"size": 512, "requested_size": 500, "state": "active_pending_free",
              "history": [hist(S1, 500)]},
             {"size": 2 * MiB - 512, "requested_size": 0, "state": "inactive"},
         ]},
    ],
    "device_traces": [[
        {"action": "alloc", "addr": S0 + 2 * MiB, "size": 1 * MiB, "stream": 0},
        {"action": "alloc", "addr": S0 + 6 * MiB, "size": 6 * MiB, "stream": 0},
        {"action": "free_requested", "addr": S0 + 2 * MiB, "size": 1 * MiB, "stream": 0},
        {"action": "free_completed", "addr": S0 + 2 * MiB, "size": 1 * MiB, "stream": 0},
    ]],
}
write("pytorch20.pickle", pytorch20)


def seg(device, addr, blocks, total=None):
    """A 2.1-and-later segment: blocks of (size, requested, state)."""
    out, at = [], addr
    for size, req, state in blocks:
        out.append({"address": at, "size": size, "requested_size": req, "state": state,
                    "frames": [frame] if state != "inactive" else []})
        at += size
    total = total or (at - addr)
    live = sum(r for _, r, s in blocks if s != "inactive")
    return {"device": device, "address": addr, "total_size": total, "allocated_size": live,
            "active_size": live, "requested_size": live, "stream": 0,
            "segment_type": "small" if total == 2 * MiB else "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": out}


D1 = [
    seg(1, 0x7E0000000000, [(8 * MiB, 8 * MiB, "active_allocated"), (4 * MiB, 3 * MiB, "active_allocated"),
                            (8 * MiB, 0, "inactive")]),
    seg(1, 0x7E0001400000, [(1 * MiB, 1000000, "active_allocated"), (1 * MiB, 0, "inactive")]),
]
D1_LIVE = 8 * MiB + 3 * MiB + 1000000

# torch.cuda.memory_snapshot(): a list of segments, all on device 1.
write("segments-list.pickle", D1)

# _snapshot() with history off: segments on device 1, every trace empty.
write("device1-empty-traces.pickle", {"segments": D1, "device_traces": [[], []]})

# A lone snapshot marker on device 0, all data on device 1.
write("marker-device0.pickle", {
    "segments": D1,
    "device_traces": [
        [{"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 5}],
        [{"action": "alloc", "addr": 0x7E0001300000, "size": 1 * MiB, "requested_size": 1 * MiB, "stream": 0, "time_us": 1},
         {"action": "free_requested", "addr": 0x7E0001300000, "size": 1 * MiB, "stream": 0, "time_us": 2},
         {"action": "free_completed", "addr": 0x7E0001300000, "size": 1 * MiB, "stream": 0, "time_us": 2}],
    ],
})

# Segments on devices 0 and 1, no trace.
write("segments-two-devices.pickle", {
    "segments": [seg(0, 0x7D0000000000, [(2 * MiB, 2 * MiB, "active_allocated"), (18 * MiB, 0, "inactive")])] + D1,
    "device_traces": [[], []],
})


def allocs(base, sizes, t0):
    return [{"action": "alloc", "addr": base + i * 32 * MiB, "size": s, "requested_size": s, "stream": 0,
             "time_us": t0 + i} for i, s in enumerate(sizes)]


# Three devices with real traces (and an empty fourth), no segments kept.
write("three-devices.pickle", {
    "segments": [],
    "device_traces": [
        allocs(0x7A0000000000, [1 * MiB], 1),
        allocs(0x7B0000000000, [2 * MiB, 2 * MiB], 1),
        allocs(0x7C0000000000, [3 * MiB, 3 * MiB, 3 * MiB], 1),
        [],
    ],
})

# Cached memory only: a segment with no live block, no trace.
write("cached-only.pickle", {
    "segments": [seg(0, 0x790000000000, [(20 * MiB, 0, "inactive")])],
    "device_traces": [[]],
})
