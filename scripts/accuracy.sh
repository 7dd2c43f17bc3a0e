#!/usr/bin/env bash
# accuracy.sh [DIR] [OUT.md]: the torch model's accuracy on a folder of
# PyTorch snapshots. Every file is replayed (gpumem replay -json, every
# device with data); for each device whose trace holds allocations the
# model's peak reserve, replayed as the recording ran (its settings, its
# addresses, its cache releases, the capacity it shows), is set against
# PyTorch's recorded peak; the table gives each one's error and the median
# and worst. A device whose trace holds no
# allocation gets no percentage, only what PyTorch held at the dump.
#
#   scripts/accuracy.sh ../shared/traces docs/results/accuracy.md
#
# DIR defaults to ../shared/traces, OUT to standard output. Needs go and
# python3 (no packages).
set -euo pipefail
dir="${1:-../shared/traces}"
out="${2:-/dev/stdout}"
[ -d "$dir" ] || { echo "accuracy.sh: $dir is not a folder" >&2; exit 2; }
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/gpumem" ./cmd/gpumem)
n=0
for f in "$dir"/*; do
	[ -f "$f" ] || continue
	case "$f" in *.md | *.txt) continue ;; esac
	n=$((n + 1))
	echo "accuracy.sh: $(basename "$f")" >&2
	if ! "$work/gpumem" replay -quiet -json -no-search -policies torch "$f" >"$work/$n.json" 2>"$work/$n.err"; then
		printf '{"error": %s}\n' "$(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read().strip()))' "$work/$n.err")" >"$work/$n.json"
	fi
	echo "$f" >"$work/$n.name"
done
python3 - "$work" "$n" "$(date -u +%Y-%m-%d)" "$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)" >"$out" <<'PY'
import json, os, statistics, sys
work, n, day, commit = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
gib = lambda b: f"{b / 2**30:.3f} GiB"
rows, errors, noalloc = [], [], []
for i in range(1, n + 1):
    name = os.path.basename(open(f"{work}/{i}.name").read().strip())
    d = json.load(open(f"{work}/{i}.json"))
    if "error" in d:
        rows.append(f"| {name} | - | - | - | - | not replayed: {d['error'].splitlines()[-1][:120]} |")
        continue
    devices = d["devices"] if "devices" in d else [{"device": None, "report": d}]
    for dev in devices:
        rep = dev.get("report") or {}
        label = name if dev["device"] is None else f"{name} (device {dev['device']})"
        p = rep.get("pytorch") or {}
        if not p:
            rows.append(f"| {label} | - | - | - | - | a native trace: no recording to compare |")
            continue
        if p.get("model_error") is None:
            noalloc.append(label)
            rows.append(f"| {label} | - | {gib(p.get('reserved_at_dump_bytes', 0))} at the dump | - | - | no allocation in the trace: no percentage; {gib(rep.get('peak_live_bytes', 0))} live at the dump |")
            continue
        e = p["model_error"]
        errors.append(e)
        notes = []
        runs = {r["kind"]: r["runs"] for r in p.get("releases") or []}
        if runs.get("empty_cache"):
            notes.append(f"{runs['empty_cache']} empty_cache replayed")
        if p.get("model_capacity_bytes"):
            c = p.get("recorded_capacity") or {}
            src = "an oom entry" if str(c.get("from", "")).startswith("oom entry") else "an out-of-memory retry"
            notes.append(f"at the recorded capacity, {gib(p['model_capacity_bytes'])} ({src})")
        if p.get("model_failed_allocs"):
            notes.append(f"{p['model_failed_allocs']} allocations failed there")
        rows.append(f"| {label} | {gib(rep.get('peak_live_bytes', 0))} | {gib(p['peak_reserved_bytes'])} | {gib(p['model_peak_reserved_bytes'])} | {100 * e:+.2f} % | {'; '.join(notes)} |")
print(f"# The torch model's accuracy on real snapshots\n")
print(f"Generated {day} at {commit} by `scripts/accuracy.sh` (`gpumem replay -json -no-search -policies torch` on each file, every")
print("device with data). The model replays each trace as the recording ran: the allocator settings the snapshot recorded")
print("(PyTorch's defaults when none), its segments at the recorded addresses, the program's cache releases (empty_cache) as")
print("cleanups where it made them, at the capacity the trace shows (an oom entry's free bytes, an out-of-memory retry) or")
print("else unlimited. Error: the model's peak reserve against PyTorch's recorded peak from the trace's first allocation on,")
print("signed (positive: the model reserves more).\n")
print("| snapshot | peak live | PyTorch's peak reserve | the model's | error | note |")
print("|---|---|---|---|---|---|")
for r in rows:
    print(r)
if errors:
    a = [abs(e) for e in errors]
    worst = max(errors, key=abs)
    within = sum(1 for x in a if x <= 0.01)
    print(f"\n{len(errors)} device replays whose trace holds allocations: median error {100 * statistics.median(errors):+.2f} %, "
          f"worst {100 * worst:+.2f} %, {within} of {len(errors)} within 1 %.")
if noalloc:
    print(f"{len(noalloc)} without an allocation in the trace: no percentage (what PyTorch held at the dump is shown instead).")
PY
