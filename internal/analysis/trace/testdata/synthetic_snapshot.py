# Writes the synthetic snapshot fixtures of snapshot_test.go (SPEC §12.8 #67):
# synthetic-p{2,4,5}.pickle, synthetic.json and synthetic-p4.pickle.gz, all
# the same content. Run from this directory: python3 synthetic_snapshot.py
import gzip, json, pickle

MiB = 1 << 20
frame = {"name": "forward", "filename": "model.py", "line": 7}
frames = [frame, frame]  # shared: exercises the memo

def blk(addr, size, req, state):
    return {"address": addr, "size": size, "requested_size": req, "state": state, "frames": frames}

snap = {
    "segments": [
        {"device": 0, "address": 0x1000000, "total_size": 2 * MiB, "allocated_size": 3584,
         "active_size": 3584, "requested_size": 3860, "stream": 5, "segment_type": "small",
         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
         "blocks": [
             blk(0x1000000, 1024, 1000, "active_allocated"),      # prelude
             blk(0x1000400, 512, 512, "active_awaiting_free"),    # prelude
             blk(0x1000600, 512, 300, "active_pending_free"),     # prelude
             blk(0x1000800, 2048, 2048, "active_allocated"),      # allocated in the trace
             blk(0x1001000, 2 * MiB - 0x1000, 0, "inactive"),
         ]},
        {"device": 0, "address": 0x2000000, "total_size": 20 * MiB, "allocated_size": 4096,
         "active_size": 4096, "requested_size": 4096, "stream": 7, "segment_type": "large",
         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
         "blocks": [
             blk(0x2000000, 4096, 4096, "active_allocated"),
             blk(0x2001000, 20 * MiB - 4096, 0, "inactive"),
         ]},
        {"device": 1, "address": 0x5000000, "total_size": 2 * MiB, "allocated_size": 0,
         "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "small",
         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
         "blocks": [blk(0x5000000, 512, 512, "active_allocated")]},  # other device
    ],
    "device_traces": [[
        {"action": "segment_alloc", "addr": 0x2000000, "size": 20 * MiB, "stream": 7, "time_us": 100, "frames": frames},
        {"action": "alloc", "addr": 0x2000000, "size": 2 * MiB, "requested_size": 2000000, "stream": 7, "time_us": 101, "frames": frames},
        {"action": "alloc", "addr": 0x2200000, "size": 1536, "stream": 3, "time_us": 102, "frames": []},
        {"action": "alloc", "addr": 0x2000000, "size": 4096, "stream": 7, "time_us": 103},
        {"action": "free_requested", "addr": 0x2200000, "size": 1536, "stream": 3, "time_us": 104},
        {"action": "free_completed", "addr": 0x2200000, "size": 1536, "stream": 3, "time_us": 105},
        {"action": "free_completed", "addr": 0x9999000, "stream": 3, "time_us": 106},
        {"action": "free_completed", "addr": 0x7777000, "size": 8192, "stream": 7, "time_us": 107},
        {"action": "oom", "device_free": 123, "size": 1 << 40, "stream": 7, "time_us": 108},
        {"action": "annotate", "addr": 0, "size": 0, "stream": 0, "time_us": 109},
        {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 110},
        {"action": "alloc", "addr": 0x1000800, "size": 2048, "stream": 5},
        {"action": "free_requested", "addr": 0x1000000, "size": 1024, "stream": 5, "time_us": 112},
        {"action": "segment_free", "addr": 0x3000000, "size": 2 * MiB, "stream": 5, "time_us": 120},
    ], []],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "expandable_segments": False},
    "external_annotations": [],
}

for p in (2, 4, 5):
    with open(f"synthetic-p{p}.pickle", "wb") as f:
        pickle.dump(snap, f, protocol=p)
with open("synthetic-p4.pickle.gz", "wb") as f:
    f.write(gzip.compress(pickle.dumps(snap, protocol=4), mtime=0))
with open("synthetic.json", "w") as f:
    json.dump(snap, f)
