#!/usr/bin/env bash
# policy-sweep.sh [flags] BASE: what a policy change does to each policy's
# smallest capacity on many generated workloads and the shared snapshots,
# BASE (a git revision, . for the working tree, or the path of a gpumem
# binary) against the working tree. A placement or make-room rule tuned to
# a few traces shows on the others; this replays them all side by side and
# says, per group of traces, how many figures fell and rose, every one that
# rose, and on how many traces each gpumem policy needs more memory than
# the torch model (PyTorch's allocator with its defaults), before and after.
#
#   scripts/policy-sweep.sh a7f004c
#   scripts/policy-sweep.sh -seeds 5 -forward-seeds 20 -policies adaptive-pages HEAD
#
# The traces: `gpumem synth -workload W -seed N` for N in 1..-seeds (31) of
# each workload but forward, forward for N in 1..-forward-seeds (120; shown
# in two halves: tune a rule on the first, judge it on the second), and
# every snapshot in -snapshots (default ../shared/traces, skipped when
# absent). Each is replayed with `gpumem replay -json -quiet -policies
# P,torch` (-policies P: adaptive,adaptive-pages) by both binaries, -j N at
# once (default: the CPUs). Exit status: 0 no figure rose, 1 a figure rose,
# 2 a usage error or a failed build. Needs go, git and python3 (no
# packages).

set -euo pipefail
usage() { # exit status
	sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit "$1"
}
seeds=31 fwd=120 policies=adaptive,adaptive-pages jobs=$(nproc 2>/dev/null || echo 2)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
snapshots="$root/../shared/traces"
while [ $# -gt 0 ]; do
	case "$1" in
	-seeds) seeds="${2:?}"; shift 2 ;;
	-forward-seeds) fwd="${2:?}"; shift 2 ;;
	-policies) policies="${2:?}"; shift 2 ;;
	-snapshots) snapshots="${2:?}"; shift 2 ;;
	-j) jobs="${2:?}"; shift 2 ;;
	-h | -help | --help) usage 0 ;;
	-*) echo "policy-sweep.sh: unknown flag $1" >&2; usage 2 ;;
	*) break ;;
	esac
done
[ $# -eq 1 ] || usage 2
base="$1"
for n in "$seeds" "$fwd" "$jobs"; do
	case "$n" in '' | *[!0-9]*) echo "policy-sweep.sh: $n is not a count" >&2; exit 2 ;; esac
done
case ",$policies," in *,torch,*) echo "policy-sweep.sh: -policies lists gpumem policies; torch is always replayed" >&2; exit 2 ;; esac

work="$(mktemp -d)"
trap 'git -C "$root" worktree remove --force "$work/base-tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/cand" ./cmd/gpumem) || exit 2
if [ "$base" = . ]; then
	cp "$work/cand" "$work/base"
	baseName="the working tree"
elif [ -f "$base" ] && [ -x "$base" ]; then
	cp "$base" "$work/base"
	baseName="$base"
else
	rev="$(git -C "$root" rev-parse --verify --quiet "$base^{commit}")" || { echo "policy-sweep.sh: $base is not a revision" >&2; exit 2; }
	git -C "$root" worktree add --quiet --detach "$work/base-tree" "$rev" || exit 2
	(cd "$work/base-tree" && go build -o "$work/base" ./cmd/gpumem) || exit 2
	baseName="$(git -C "$root" rev-parse --short "$rev")"
fi

mkdir -p "$work/traces" "$work/out"
for w in $("$work/cand" synth -h 2>&1 | sed -n 's/.*NAME: one of //p' | tr -d ','); do
	n=$seeds
	[ "$w" = forward ] && n=$fwd
	for s in $(seq 1 "$n"); do
		"$work/cand" synth -workload "$w" -seed "$s" -o "$work/traces/$w-$s.jsonl" >/dev/null
	done
done
if [ -d "$snapshots" ]; then
	for f in "$snapshots"/*; do
		case "$f" in *.pickle | *.pkl | *.json | *.json.gz | *.pickle.gz) ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$work/traces/" ;; esac
	done
fi
total=$(ls "$work/traces" | wc -l)
echo "policy-sweep.sh: $total traces, $policies and torch, base $baseName against the working tree" >&2

# One replay: the smallest capacity of each policy (of each device, for a
# snapshot with several), as "policy[@device]=MiB" words.
replay() { # bin trace out
	"$1" replay -json -quiet -policies "$policies,torch" "$2" 2>"$3.err" | python3 -c '
import json, sys
d = json.load(sys.stdin)
reps = [x["report"] for x in d["devices"]] if "devices" in d else [d]
print(" ".join("%s%s=%d" % (p["name"], "" if len(reps) == 1 else "@%d" % i, p["min_capacity_bytes"] >> 20)
    for i, r in enumerate(reps) for p in r["policies"] if p.get("min_capacity_bytes")))' >"$3" ||
		echo "policy-sweep.sh: $(basename "$2"): $(head -c 300 "$3.err")" >&2
}
export -f replay
export policies
ls "$work/traces" | sed "s|^|$work/traces/|" | xargs -P "$jobs" -I{} bash -c '
	n=$(basename "{}"); n=${n%.gz}; n=${n%.*}
	replay "'"$work"'/base" "{}" "'"$work"'/out/$n.base"
	replay "'"$work"'/cand" "{}" "'"$work"'/out/$n.cand"'

python3 - "$work/out" "$fwd" "$baseName" <<'PY'
import collections, os, re, sys
out, fwd, base = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(path):
    try:
        return dict(w.split("=") for w in open(path).read().split())
    except OSError:
        return {}
def group(name):
    m = re.fullmatch(r"([a-z-]+)-(\d+)", name)
    if not m:
        return "snapshots"
    if m[1] == "forward":
        half = (fwd + 1) // 2
        return f"forward 1-{half}" if int(m[2]) <= half else f"forward {half + 1}-{fwd}"
    return m[1]
rows = collections.OrderedDict()
rose, missing = [], []
for name in sorted({f.rsplit(".", 1)[0] for f in os.listdir(out) if not f.endswith(".err")}):
    b, c = load(f"{out}/{name}.base"), load(f"{out}/{name}.cand")
    if not b or not c:
        missing.append(name)
        continue
    for key in sorted(b):
        pol, _, dev = key.partition("@")
        if pol == "torch" or key not in c:
            continue
        bv, cv = int(b[key]), int(c[key])
        torch = b.get("torch" + ("@" + dev if dev else ""))
        r = rows.setdefault((group(name), pol), collections.Counter())
        r["n"] += 1
        if cv < bv:
            r["lower"] += 1; r["down"] += bv - cv
        elif cv > bv:
            r["higher"] += 1; r["up"] += cv - bv
            rose.append(f"  {name}{' device ' + dev if dev else ''} {pol}: {bv} -> {cv} MiB (torch {torch})")
        if torch is not None:
            r["above_b"] += bv > int(torch); r["above_c"] += cv > int(torch)
print(f"smallest capacity, MiB: base {base} against the working tree")
print(f"{'group':<16} {'policy':<16} {'figures':>7} {'lower (MiB)':>14} {'higher (MiB)':>14}  above torch")
for (g, pol), r in sorted(rows.items(), key=lambda kv: (kv[0][0] == "snapshots", kv[0])):
    lower, higher = f"{r['lower']} (-{r['down']})", f"{r['higher']} (+{r['up']})"
    print(f"{g:<16} {pol:<16} {r['n']:>7} {lower:>14} {higher:>14}  {r['above_b']} -> {r['above_c']}")
if rose:
    print("rose:")
    print("\n".join(rose))
if missing:
    print("no figures (see the messages above): " + ", ".join(missing))
sys.exit(1 if rose else 0)
PY
