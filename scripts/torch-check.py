#!/usr/bin/env python3
"""torch-check.py: PyTorch, running on the card, judges gpumem's verdicts.

gpumem advise replays a PyTorch memory snapshot through its model of
PyTorch's caching allocator and says the smallest capacity each setting
needs ("this workload fits at C with these settings, and runs out below").
This script checks that against PyTorch itself, on a real GPU, with nothing
to download:

 1. it builds four workloads of its own (a transformer training step at two
    sizes, a CNN training step, a generation loop whose KV cache grows by
    concatenation) and runs each once in a fresh process, recording a
    snapshot (torch.cuda.memory._record_memory_history, _dump_snapshot);
 2. it runs the carried `gpumem advise -json` on each snapshot and reads the
    smallest capacity C of PyTorch's defaults and of
    expandable_segments:True (the policies "torch:defaults" and
    "torch:expandable_segments:True");
 3. for each workload and setting, in fresh processes capped with
    torch.cuda.set_per_process_memory_fraction (which caps PyTorch's
    caching allocator alone: the CUDA context and library handles lie
    outside it, as they lie outside the snapshot), it runs the workload at
    C, where it must complete, at C - 2 MiB, where gpumem says it runs out
    (PyTorch reserves whole 2 MiB units), and a few percent below C
    (C x 0.97), where it must raise torch.OutOfMemoryError. Where reality
    and the verdict differ it searches, in the time left, for the
    capacity where the workload starts to complete, and the table says how
    far that lies from C.

It writes OUT/torch-check.json (everything), OUT/torch-check.txt (the
table of predicted against observed), the snapshots and advise's JSON, and
prints "figure: NAME VALUE" lines and a last line "result: pass",
"result: fail: WHY" or "result: skip: WHY" (exit 0, 1, 2) for the kit's
gpu-check.sh.

    python3 torch-check.py --gpumem bin/gpumem --out OUT [--budget SECONDS] [--quick]

The logic that needs no GPU (reading advise's JSON, choosing the caps and
fractions, the search, the verdicts and the table) imports without torch:
scripts/gpukit/test_torch_check.py tests it on the shared snapshots.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

MiB = 1 << 20
GiB = 1 << 30
UNIT = 2 * MiB  # PyTorch's caching allocator reserves whole 2 MiB units
BELOW = 0.03  # "a few percent below" the predicted capacity

# The settings checked: name, PYTORCH_CUDA_ALLOC_CONF, advise's policy name.
SETTINGS = [
    ("defaults", "", "torch:defaults"),
    ("expandable", "expandable_segments:True", "torch:expandable_segments:True"),
]

# The workloads and their parameters: full size for the GPU, and a quick
# size for CI and for trying the code on a CPU.
WORKLOADS = {
    "transformer-small": ("transformer", dict(d_model=512, layers=6, batch=16, seq=256, steps=3)),
    "transformer-large": ("transformer", dict(d_model=1024, layers=12, batch=16, seq=512, steps=3)),
    "cnn": ("cnn", dict(width=64, batch=64, res=224, steps=3)),
    "generation": ("generation", dict(d_model=1024, layers=8, batch=8, prompt=256, new_tokens=256, vocab=32000)),
}
QUICK_WORKLOADS = {
    "transformer-small": ("transformer", dict(d_model=128, layers=2, batch=4, seq=64, steps=2)),
    "transformer-large": ("transformer", dict(d_model=256, layers=3, batch=4, seq=128, steps=2)),
    "cnn": ("cnn", dict(width=16, batch=8, res=64, steps=2)),
    "generation": ("generation", dict(d_model=128, layers=2, batch=2, prompt=32, new_tokens=32, vocab=1000)),
}


# ---------------------------------------------------------------------------
# GPU-free logic

def read_advise(doc):
    """Reads `gpumem advise -json`'s output: for each checked setting, the
    smallest capacity its policy needs and its peak reserved without a
    limit; with the trace's own figures."""
    c = doc["comparison"]
    by_name = {p["name"]: p for p in c["policies"]}
    settings = {}
    for name, conf, policy in SETTINGS:
        p = by_name.get(policy)
        if p is None:
            raise ValueError("advise's output has no policy %r (policies: %s)" % (policy, ", ".join(sorted(by_name))))
        settings[name] = {
            "policy": policy,
            "conf": conf,
            "min_capacity": int(p["min_capacity_bytes"]),
            "peak_reserved": int(p["peak_reserved_bytes"]),
            "failed_allocs": int(p.get("failed_allocs", 0)),
        }
    pt = c.get("pytorch", {})
    return {
        "trace": c.get("trace", ""),
        "events": int(c.get("events", 0)),
        "peak_live": int(c.get("peak_live_bytes", 0)),
        "recorded_reserved": int(c.get("recorded_reserved_bytes", 0)),
        "reserved_at_trace_start": int(pt.get("reserved_at_trace_start_bytes", 0)),
        "warnings": c.get("warnings", {}) or {},
        "best_setting": doc.get("best_setting", ""),
        "settings": settings,
    }


def round_down(n, unit=UNIT):
    return n // unit * unit


def cap_fraction(cap, total):
    """The fraction for torch.cuda.set_per_process_memory_fraction that lets
    PyTorch reserve exactly cap bytes (a multiple of 2 MiB) and not one unit
    more: PyTorch allows size_t(fraction * total), so aim at cap + 1 MiB,
    which no rounding of the product moves past either end."""
    if cap <= 0 or cap % UNIT:
        raise ValueError("cap %d is not a positive multiple of 2 MiB" % cap)
    f = (cap + MiB) / float(total)
    if f > 1:
        raise ValueError("cap %d exceeds the device's %d bytes" % (cap, total))
    return f


def allowed_bytes(fraction, total):
    """What PyTorch's allocator allows under fraction (allowed_memory_maximum)."""
    return int(fraction * float(total))


def planned_caps(c):
    """The caps every case runs: at the prediction, one unit below it, and a
    few percent below it."""
    return {"at": c, "tight": c - UNIT, "below": round_down(int(c * (1 - BELOW)))}


class Search:
    """The probes of one workload and setting, and what they found.

    Outcomes are "complete", "oom" or "error". The threshold T is the
    smallest cap at which the workload completes; lo is the largest cap seen
    to run out, hi the smallest seen to complete, so T lies in (lo, hi]."""

    MAX_PROBES = 12

    def __init__(self, predicted, limit):
        self.predicted = predicted
        self.limit = limit  # the largest cap worth trying (the device's memory)
        self.results = {}  # cap -> outcome
        self.tol = max(UNIT, round_down(int(predicted * 0.005)))

    def record(self, cap, outcome):
        self.results[cap] = outcome

    def bounds(self):
        oom = [c for c, o in self.results.items() if o == "oom"]
        ok = [c for c, o in self.results.items() if o == "complete"]
        return (max(oom) if oom else None), (min(ok) if ok else None)

    def monotone(self):
        lo, hi = self.bounds()
        return lo is None or hi is None or lo < hi

    def done(self):
        if any(o == "error" for o in self.results.values()):
            return True
        if not self.monotone() or len(self.results) >= self.MAX_PROBES:
            return True
        lo, hi = self.bounds()
        return lo is not None and hi is not None and hi - lo <= self.tol

    def next_cap(self):
        """The next cap to probe once the planned ones ran, or None."""
        if self.done():
            return None
        lo, hi = self.bounds()
        c = self.predicted
        if hi is None:  # ran out everywhere tried: look above
            for m in (1.05, 1.15, 1.4, 2.0, 4.0):
                cap = round_down(int(c * m))
                if (lo is None or cap > lo) and cap not in self.results and cap <= self.limit:
                    return cap
            return None
        if lo is None:  # completed everywhere tried: look below
            for m in (0.9, 0.75, 0.5, 0.25):
                cap = round_down(int(c * m))
                if cap < hi and cap > 0 and cap not in self.results:
                    return cap
            return None
        mid = round_down((lo + hi) // 2)
        if mid <= lo or mid >= hi or mid in self.results:
            return None
        return mid


def judge(predicted, results, search=None):
    """The verdict of one workload and setting: whether PyTorch completed at
    the predicted capacity and ran out a few percent below it, whether
    gpumem's capacity was exact (out at C - 2 MiB as well), and where the
    real threshold lies."""
    caps = planned_caps(predicted)
    at = results.get(caps["at"])
    below = results.get(caps["below"])
    tight = results.get(caps["tight"])
    v = {
        "predicted": predicted,
        "at": at,
        "tight": tight,
        "below": below,
        "holds": at == "complete" and below == "oom",
        "exact": at == "complete" and tight == "oom",
    }
    s = search or Search(predicted, predicted * 4)
    if search is None:
        for cap, o in results.items():
            s.record(cap, o)
    lo, hi = s.bounds()
    v["observed_lo"], v["observed_hi"] = lo, hi
    v["monotone"] = s.monotone()
    if any(o == "error" for o in results.values()):
        v["verdict"] = "error"
    elif at is None or below is None:
        v["verdict"] = "incomplete"
    elif v["holds"]:
        v["verdict"] = "exact" if v["exact"] else "holds"
    else:
        v["verdict"] = "differs"
    # How far reality lies from the prediction: the threshold's interval
    # less C (positive: PyTorch needed more than gpumem said).
    if hi is not None:
        v["off_by_max"] = hi - predicted
    if lo is not None:
        v["off_by_min"] = lo + UNIT - predicted
    return v


def error_case(workload, setting, message):
    """A case that produced no verdict: its workload could not be recorded
    or advised, or the case itself broke."""
    return {"workload": workload, "setting": setting, "conf": "", "probes": [],
            "verdict": {"predicted": 0, "at": None, "tight": None, "below": None, "verdict": "error", "message": message}}


def fmt_bytes(n):
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= GiB:
        return "%s%.3f GiB" % (sign, n / GiB)
    return "%s%.1f MiB" % (sign, n / MiB)


def fmt_off(v):
    """The distance from the prediction to the observed threshold."""
    lo, hi, c = v.get("observed_lo"), v.get("observed_hi"), v["predicted"]
    if v["verdict"] in ("exact",):
        return "0"
    if lo is None and hi is None:
        return "-"
    if hi is None:
        return "> %s (%+.2f%%)" % (fmt_bytes(lo + UNIT - c), 100.0 * (lo + UNIT - c) / c)
    if lo is None:
        return "<= %s (%+.2f%%)" % (fmt_bytes(hi - c), 100.0 * (hi - c) / c)
    a, b = lo + UNIT - c, hi - c
    if a == b:
        return "%s (%+.2f%%)" % (fmt_bytes(a), 100.0 * a / c)
    return "%s .. %s (%+.2f%% .. %+.2f%%)" % (fmt_bytes(a), fmt_bytes(b), 100.0 * a / c, 100.0 * b / c)


def table(cases, recorded):
    """The text report: for each workload and setting the prediction and
    what PyTorch did at each cap; then the unlimited runs' peaks against
    the model's."""
    lines = []
    hdr = ("workload", "setting", "gpumem: needs C", "at C", "C-2MiB", "C-3%", "observed threshold T in", "T - C", "verdict")
    rows = []
    for c in cases:
        v = c["verdict"]
        lo, hi = v.get("observed_lo"), v.get("observed_hi")
        interval = "(%s, %s]" % (fmt_bytes(lo) if lo is not None else "?", fmt_bytes(hi) if hi is not None else "?")
        rows.append((c["workload"], c["setting"], fmt_bytes(v["predicted"]), v["at"] or "not run",
                     v["tight"] or "not run", v["below"] or "not run", interval, fmt_off(v), v["verdict"]))
    lines += _grid(hdr, rows)
    lines.append("")
    lines.append("verdicts: exact = completes at C and runs out at C - 2 MiB; holds = completes at C and runs out at C x 0.97;")
    lines.append("differs = not so (T - C says by how much: positive, PyTorch needed more than gpumem said).")
    lines.append("")
    hdr2 = ("workload", "events", "peak live", "defaults: peak reserved, model", "observed", "expandable: model", "observed")
    rows2 = []
    for r in recorded:
        rows2.append((r["workload"], str(r.get("events", "-")), fmt_bytes(r.get("peak_live")),
                      fmt_bytes(r.get("model_peak_defaults")), fmt_bytes(r.get("observed_peak_defaults")),
                      fmt_bytes(r.get("model_peak_expandable")), fmt_bytes(r.get("observed_peak_expandable"))))
    lines += _grid(hdr2, rows2)
    lines.append("(peaks without a limit: the model's peak reserved against torch.cuda.max_memory_reserved())")
    return "\n".join(lines) + "\n"


def _grid(hdr, rows):
    w = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)] if rows else [len(h) for h in hdr]
    out = ["  ".join(str(x).ljust(w[i]) for i, x in enumerate(hdr)).rstrip()]
    out.append("  ".join("-" * w[i] for i in range(len(hdr))))
    for r in rows:
        out.append("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)).rstrip())
    return out


def summarize(cases):
    """The figures gpu-check.sh records and the script's result line."""
    n = {"exact": 0, "holds": 0, "differs": 0, "error": 0, "incomplete": 0}
    for c in cases:
        n[c["verdict"]["verdict"]] = n.get(c["verdict"]["verdict"], 0) + 1
    figures = {"cases": len(cases)}
    figures.update({"verdict_" + k: v for k, v in n.items()})
    bad = n["differs"] + n["error"] + n["incomplete"]
    if not cases:
        result = "fail: no case ran"
    elif bad:
        parts = ["%d %s" % (n[k], k) for k in ("differs", "error", "incomplete") if n[k]]
        result = "fail: %s of %d cases (see the table)" % (", ".join(parts), len(cases))
    else:
        result = "pass"
    return figures, result


# ---------------------------------------------------------------------------
# The workloads (torch is passed in: this module imports without it)

def wl_transformer(torch, dev, d_model, layers, batch, seq, steps):
    nn = torch.nn
    vocab = 1000
    layer = nn.TransformerEncoderLayer(d_model, nhead=max(1, d_model // 64), dim_feedforward=4 * d_model,
                                       dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False).to(dev)
    head = nn.Linear(d_model, vocab).to(dev)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    for _ in range(steps):
        x = torch.randn(batch, seq, d_model, device=dev)
        y = torch.randint(0, vocab, (batch, seq), device=dev)
        loss = nn.functional.cross_entropy(head(model(x)).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y, loss


def wl_cnn(torch, dev, width, batch, res, steps):
    nn = torch.nn

    def block(cin, cout, stride):
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    model = nn.Sequential(
        nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
        block(width, width, 1), block(width, 2 * width, 2), block(2 * width, 4 * width, 2), block(4 * width, 8 * width, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8 * width, 1000)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        x = torch.randn(batch, 3, res, res, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y, loss


def wl_generation(torch, dev, d_model, layers, batch, prompt, new_tokens, vocab):
    nn = torch.nn
    F = nn.functional
    heads = max(1, d_model // 64)
    hd = d_model // heads
    emb = nn.Embedding(vocab, d_model).to(dev)
    blocks = [nn.ModuleDict(dict(
        ln1=nn.LayerNorm(d_model), qkv=nn.Linear(d_model, 3 * d_model), proj=nn.Linear(d_model, d_model),
        ln2=nn.LayerNorm(d_model), up=nn.Linear(d_model, 4 * d_model), down=nn.Linear(4 * d_model, d_model))).to(dev)
        for _ in range(layers)]
    head = nn.Linear(d_model, vocab).to(dev)
    cache = [None] * layers
    with torch.no_grad():
        x = torch.randint(0, vocab, (batch, prompt), device=dev)
        for _ in range(new_tokens + 1):
            h = emb(x)
            n = h.shape[1]
            for i, b in enumerate(blocks):
                q, k, v = b["qkv"](b["ln1"](h)).split(d_model, dim=-1)
                q, k, v = (t.reshape(batch, n, heads, hd).transpose(1, 2) for t in (q, k, v))
                first = cache[i] is None
                if not first:  # the KV cache grows by concatenation, one token a step
                    k = torch.cat([cache[i][0], k], dim=2)
                    v = torch.cat([cache[i][1], v], dim=2)
                cache[i] = (k, v)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=first)
                h = h + b["proj"](a.transpose(1, 2).reshape(batch, n, d_model))
                h = h + b["down"](F.gelu(b["up"](b["ln2"](h))))
            x = head(h[:, -1, :]).argmax(dim=-1, keepdim=True)


KINDS = {"transformer": wl_transformer, "cnn": wl_cnn, "generation": wl_generation}


def run_workload(torch, name, quick, dev):
    kind, params = (QUICK_WORKLOADS if quick else WORKLOADS)[name]
    torch.manual_seed(0)
    KINDS[kind](torch, dev, **params)


# ---------------------------------------------------------------------------
# The worker: one workload in this process, as the parent asked

def worker(spec):
    """Runs spec's workload on cuda:0 (fresh process; PYTORCH_CUDA_ALLOC_CONF
    already set by the parent), capped at spec["cap"] bytes when given,
    recording a snapshot to spec["record"] when given. Prints one
    TORCHCHECK-RESULT line."""
    import gc
    gc.disable()  # frees by reference counts alone: the same order every run
    res = {"workload": spec["workload"], "cap": spec.get("cap"), "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    t0 = time.time()
    try:
        import torch
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
        dev = torch.device(spec.get("device", "cuda"))
        cuda = dev.type == "cuda"
        if cuda:
            free, total = torch.cuda.mem_get_info(0)
            res["device_total"], res["device_free"] = total, free
            if spec.get("cap"):
                f = cap_fraction(spec["cap"], total)
                torch.cuda.set_per_process_memory_fraction(f, 0)
                res["fraction"], res["allowed"] = f, allowed_bytes(f, total)
            if spec.get("record"):
                try:
                    torch.cuda.memory._record_memory_history(max_entries=10000000, stacks="python")
                except TypeError:
                    torch.cuda.memory._record_memory_history(max_entries=10000000)
        oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
        try:
            run_workload(torch, spec["workload"], spec.get("quick", False), dev)
            if cuda:
                torch.cuda.synchronize()
            res["outcome"] = "complete"
        except oom as e:
            res["outcome"] = "oom"
            res["message"] = str(e).splitlines()[0][:300]
        if cuda:
            res["max_reserved"] = torch.cuda.max_memory_reserved()
            res["max_allocated"] = torch.cuda.max_memory_allocated()
            res["num_alloc_retries"] = torch.cuda.memory_stats().get("num_alloc_retries", 0)
            if spec.get("record"):
                torch.cuda.memory._dump_snapshot(spec["record"])
                torch.cuda.memory._record_memory_history(enabled=None)
    except Exception as e:  # anything else is the check's error, not a verdict
        res["outcome"] = "error"
        res["message"] = ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:500]
    res["seconds"] = round(time.time() - t0, 3)
    print("TORCHCHECK-RESULT " + json.dumps(res), flush=True)


# ---------------------------------------------------------------------------
# The parent

class Runner:
    def __init__(self, args, deadline):
        self.args = args
        self.deadline = deadline
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
        self.lock = threading.Lock()
        self.durations = []
        self.log = open(os.path.join(args.out, "torch-check.log"), "a")

    def left(self):
        return self.deadline - time.time()

    def expected(self):
        with self.lock:
            return max(self.durations) * 1.3 if self.durations else 60.0

    def probe(self, workload, conf, cap=None, record=None):
        """Runs one fresh process; returns its result dict (outcome "skipped"
        when the time budget cannot hold it)."""
        if self.left() < min(self.expected(), 120):
            return {"workload": workload, "cap": cap, "conf": conf, "outcome": "skipped", "message": "time budget spent"}
        spec = {"workload": workload, "cap": cap, "record": record, "quick": self.args.quick}
        env = dict(os.environ)
        # Both names: PYTORCH_ALLOC_CONF is the newer, device-generic one.
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        env["PYTORCH_ALLOC_CONF"] = conf
        env.setdefault("PYTHONUNBUFFERED", "1")
        t0 = time.time()
        timeout = max(10.0, min(self.left(), 300.0))
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", json.dumps(spec)],
                               env=env, capture_output=True, text=True, timeout=timeout)
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err, rc = "timed out after %.0f s" % timeout, "(killed)"
        el = time.time() - t0
        res = None
        for line in out.splitlines():
            if line.startswith("TORCHCHECK-RESULT "):
                res = json.loads(line[len("TORCHCHECK-RESULT "):])
        if res is None:
            tail = (err or out or "").strip().splitlines()[-3:]
            res = {"workload": workload, "cap": cap, "conf": conf, "outcome": "error",
                   "message": "worker exited %s without a result: %s" % (rc, " | ".join(tail))}
        with self.lock:
            if res["outcome"] in ("complete", "oom"):
                self.durations.append(el)
            self.log.write("%s conf=%r cap=%s -> %s (%.1fs)%s\n" % (workload, conf, cap, res["outcome"], el,
                                                                 (" " + res["message"]) if res.get("message") else ""))
            self.log.flush()
        return res


def advise(gpumem, snapshot, out_json):
    p = subprocess.run([gpumem, "advise", "-json", "-quiet", snapshot], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("gpumem advise %s: exit %d: %s" % (snapshot, p.returncode, p.stderr.strip()[-500:]))
    with open(out_json, "w") as f:
        f.write(p.stdout)
    return read_advise(json.loads(p.stdout))


def run_case(runner, workload, setting, conf, predicted, limit):
    """The probes of one workload and setting: the planned caps at once,
    then the search while the verdict is unclear and time is left."""
    s = Search(predicted, limit)
    caps = planned_caps(predicted)
    probes = []
    futs = {runner.pool.submit(runner.probe, workload, conf, cap): cap for cap in caps.values()}
    for f in concurrent.futures.as_completed(futs):
        r = f.result()
        probes.append(r)
        if r["outcome"] in ("complete", "oom", "error"):
            s.record(futs[f], r["outcome"])
    while True:
        cap = s.next_cap()
        if cap is None:
            break
        r = runner.pool.submit(runner.probe, workload, conf, cap).result()
        probes.append(r)
        if r["outcome"] not in ("complete", "oom", "error"):
            break
        s.record(cap, r["outcome"])
    v = judge(predicted, s.results, s)
    return {"workload": workload, "setting": setting, "conf": conf, "verdict": v,
            "probes": sorted(probes, key=lambda r: r.get("cap") or 0)}


def main_parent(args):
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()
    deadline = t_start + args.budget

    def finish(result, code, doc=None):
        if doc is not None:
            with open(os.path.join(args.out, "torch-check.json"), "w") as f:
                json.dump(doc, f, indent=1)
        print("result: " + result, flush=True)
        sys.exit(code)

    try:
        import torch
    except Exception as e:
        finish("skip: python3 (%s) cannot import torch: %s" % (sys.executable, e), 2)
    if not torch.cuda.is_available():
        finish("skip: torch %s sees no CUDA device" % torch.__version__, 2)
    if not args.gpumem or not os.access(args.gpumem, os.X_OK):
        finish("fail: no gpumem binary at %r (--gpumem)" % args.gpumem, 1)
    props = torch.cuda.get_device_properties(0)
    total = props.total_memory
    print("device: %s, %d bytes; torch %s; python %s" % (props.name, total, torch.__version__, sys.version.split()[0]), flush=True)
    del torch  # the parent runs no CUDA work of its own

    names = [w for w in WORKLOADS if not args.workloads or w in args.workloads.split(",")]
    runner = Runner(args, deadline)
    snapdir = os.path.join(args.out, "snapshots")
    os.makedirs(snapdir, exist_ok=True)
    doc = {"device": props.name, "device_total": total, "quick": args.quick, "budget_seconds": args.budget,
           "below_fraction": BELOW, "workloads": {}, "cases": []}

    # 1. Record a snapshot of each workload (PyTorch's defaults, no limit).
    rec = {}
    futs = {runner.pool.submit(runner.probe, w, "", None, os.path.join(snapdir, w + ".pickle")): w for w in names}
    for f in concurrent.futures.as_completed(futs):
        rec[futs[f]] = f.result()
    # 2. advise on each, in parallel.
    adv = {}

    def one_advise(w):
        return advise(args.gpumem, os.path.join(snapdir, w + ".pickle"), os.path.join(args.out, w + ".advise.json"))

    afuts = {}
    for w in names:
        if rec[w]["outcome"] == "complete":
            afuts[runner.pool.submit(one_advise, w)] = w
    for f in concurrent.futures.as_completed(afuts):
        w = afuts[f]
        try:
            adv[w] = f.result()
        except Exception as e:
            adv[w] = {"error": str(e)}
    # 3. The cases, and the unlimited run of each workload under
    # expandable segments (its peak against the model's). Cases block on
    # their probes, so they run on a pool of their own.
    cases_pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(names) * len(SETTINGS)))
    cfuts = {}
    efuts = {}
    for w in names:
        doc["workloads"][w] = {"recorded": rec[w], "advise": adv.get(w)}
        a = adv.get(w)
        if not a or "error" in a:
            continue
        for setting, conf, _ in SETTINGS:
            predicted = a["settings"][setting]["min_capacity"]
            cfuts[cases_pool.submit(run_case, runner, w, setting, conf, predicted, int(total * 0.95))] = (w, setting)
        efuts[w] = runner.pool.submit(runner.probe, w, "expandable_segments:True", None)
    cases = []
    for f, (w, setting) in cfuts.items():
        try:
            cases.append(f.result())
        except Exception as e:
            cases.append(error_case(w, setting, "the case failed: %s: %s" % (type(e).__name__, e)))
    cases_pool.shutdown()
    cases.sort(key=lambda c: (names.index(c["workload"]), c["setting"]))
    recorded = []
    for w in names:
        a = adv.get(w) or {}
        r = {"workload": w, "observed_peak_defaults": rec[w].get("max_reserved")}
        if "settings" in a:
            r.update(events=a["events"], peak_live=a["peak_live"],
                     model_peak_defaults=a["settings"]["defaults"]["peak_reserved"],
                     model_peak_expandable=a["settings"]["expandable"]["peak_reserved"])
        if w in efuts:
            r["observed_peak_expandable"] = efuts[w].result().get("max_reserved")
        recorded.append(r)
        if rec[w]["outcome"] != "complete":
            cases.append(error_case(w, "-", "the recording run: %s %s" % (rec[w]["outcome"], rec[w].get("message", ""))))
        elif "error" in a:
            cases.append(error_case(w, "-", a["error"]))
    doc["cases"] = cases
    doc["recorded"] = recorded
    good = [c for c in cases if c["verdict"].get("predicted")]
    text = table(good, recorded)
    errs = [c for c in cases if not c["verdict"].get("predicted")]
    for c in errs:
        text += "error: %s: %s\n" % (c["workload"], c["verdict"].get("message", ""))
    with open(os.path.join(args.out, "torch-check.txt"), "w") as f:
        f.write(text)
    print(text, flush=True)
    figures, result = summarize(cases)
    figures["seconds"] = round(time.time() - t_start, 1)
    for c in good:
        v = c["verdict"]
        key = "%s_%s" % (c["workload"], c["setting"])
        print("figure: %s_predicted %d" % (key, v["predicted"]))
        print("figure: %s_verdict %s" % (key, v["verdict"]))
        if v.get("observed_hi") is not None:
            print("figure: %s_observed_hi %d" % (key, v["observed_hi"]))
        if v.get("observed_lo") is not None:
            print("figure: %s_observed_lo %d" % (key, v["observed_lo"]))
    for k, val in figures.items():
        print("figure: %s %s" % (k, val))
    doc["figures"], doc["result"] = figures, result
    runner.pool.shutdown(wait=False)
    runner.log.close()
    finish(result, 0 if result == "pass" else 1, doc)


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch on the card judges gpumem advise's verdicts.")
    ap.add_argument("--gpumem", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "gpumem"),
                    help="the gpumem CLI (default: bin/gpumem beside this script)")
    ap.add_argument("--out", default="torch-check-out", help="where the table, JSON and snapshots go")
    ap.add_argument("--budget", type=float, default=240, help="seconds for the whole check (default 240)")
    ap.add_argument("--jobs", type=int, default=6, help="fresh processes at once (default 6)")
    ap.add_argument("--quick", action="store_true", help="small workloads (CI; a first try)")
    ap.add_argument("--workloads", default="", help="comma-separated subset of: " + ", ".join(WORKLOADS))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return
    main_parent(args)


if __name__ == "__main__":
    main()
