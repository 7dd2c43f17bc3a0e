#!/usr/bin/env bash
# Regenerates docs/results: the replay tables (and the README's copy of the
# shared snapshots' summary), then the benchmark ratios, each file dated
# today. Run from anywhere in the checkout, with ../shared/traces beside it.
#
#   scripts/results.sh              replays and benchmarks (a few minutes)
#   scripts/results.sh -no-bench    replays only (about a minute)
#   scripts/results.sh -no-replay   benchmarks only
#
# The replay tables are deterministic: `go test ./cmd/gpumem -run Results`
# checks that the replays still give them, so a change of placement, of the
# PyTorch model or of the snapshot reader shows as a failing test until this
# script is run again. Benchmarks vary with the machine: they are measured
# here and dated, never checked.
set -euo pipefail
cd "$(dirname "$0")/.."

bench=1 replay=1
for a in "$@"; do
  case "$a" in
    -no-bench) bench=0 ;;
    -no-replay) replay=0 ;;
    *) echo "usage: scripts/results.sh [-no-bench | -no-replay]" >&2; exit 2 ;;
  esac
done

if [ "$replay" = 1 ]; then
  if [ ! -d ../shared/traces ]; then
    echo "results.sh: ../shared/traces is not beside the checkout; the shared snapshots' tables need it" >&2
    exit 1
  fi
  echo "replaying the shared snapshots and the generated workloads…" >&2
  go test ./cmd/gpumem -run '^TestResultsAreWhatTheReplaysGive$' -count=1 -update-results
fi

[ "$bench" = 1 ] || exit 0

out=docs/results/benchmarks.md
# The benchmarks' own output, kept beside the table (benchstat reads it).
raw=docs/results/benchmarks.txt
: >"$raw"

# Each benchmark reports a ratio to a floor it measures in the same run
# (x-floor, x-off, x-one, x-cpython), so a figure survives a change of
# machine; three runs of each give the spread.
run() { # package, -bench pattern, extra flags…
  local pkg="$1" pattern="$2"
  shift 2
  echo "go test -run '^\$' -bench '$pattern' $* $pkg" >&2
  go test -run '^$' -bench "$pattern" -count 3 -timeout 30m "$@" "$pkg" | grep -E '^(Benchmark|goos|goarch|pkg|cpu)' >>"$raw" || true
}
load="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
load1="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)"
run . 'AllocFree$|PairAmongLiveBuffers|HistoryRecording|RelocationThroughput|ManyGoroutines' -benchmem
run ./internal/pool 'PlanCommit' -benchtime 10x
run ./internal/analysis/trace 'ReadSnapshot$' -benchmem
run ./internal/analysis/compare 'Replay/.*/(adaptive|adaptive-pages|torch)$' -benchtime 10x

cpu="$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//' || true)"
{
  echo "# Benchmarks"
  echo
  echo "Measured $(date -u +%F) by \`scripts/results.sh\` on ${cpu:-an unknown CPU}, $(nproc) cores, load average"
  echo "$load when it began. Each figure is the lowest and highest of three runs. A ratio to a floor measured in"
  echo "the same run (\`x-…\`) is the figure to compare across machines; times vary with the machine and its load."
  if awk -v l="$load1" -v n="$(nproc)" 'BEGIN { exit !(l > n) }'; then
    echo "The machine was busy with other work (a load average above its $(nproc) cores): the spreads are wide, and"
    echo "a quiet machine will give tighter figures. The benchmarks' own output is in [benchmarks.txt](benchmarks.txt)."
  else
    echo "The benchmarks' own output is in [benchmarks.txt](benchmarks.txt)."
  fi
  echo
  echo "| benchmark | what | figure | lowest | highest |"
  echo "|---|---|---|---|---|"
  awk '
    function what(name) {
      if (name ~ /^BenchmarkAllocFree\//) return "steady Alloc + Free on the host device; x-floor: ÷ a mutex lock/unlock and a map insert/delete in the same run"
      if (name ~ /^BenchmarkPairAmongLiveBuffers/) return "the same pair with 10^3 or 10^4 other buffers live"
      if (name ~ /^BenchmarkHistoryRecording/) return "the pair with the history recording (plain, or with stacks); x-off: ÷ the pair without, same run"
      if (name ~ /^BenchmarkRelocationThroughput/) return "relocating 64 MiB in allocations of the size named; x-floor: ÷ copy() of the same chunks"
      if (name ~ /^BenchmarkManyGoroutines/) return "pairs from N goroutines, each on its own stream; x-one: ÷ one goroutine, same run"
      if (name ~ /^BenchmarkPlanCommit/) return "relocation bookkeeping (plan + commit, no copies) per moved allocation; x-floor: ÷ a map insert+delete"
      if (name ~ /^BenchmarkReadSnapshot/) return "reading the training step snapshot (3.2 MB); x-cpython: ÷ CPython'"'"'s unpickler on the same bytes"
      if (name ~ /^BenchmarkReplay/) return "the replay engine on Sim storage, per event; x-floor: ÷ a map operation per event"
      return ""
    }
    # The figures each family is read by.
    function wanted(name, unit) {
      if (name ~ /^Benchmark(AllocFree|PairAmongLiveBuffers)\//) return unit ~ /^(ns\/op|x-floor|allocs\/op)$/
      if (name ~ /^BenchmarkManyGoroutines/) return unit ~ /^(ns\/op|x-one)$/
      if (name ~ /^BenchmarkHistoryRecording/) return unit ~ /^(on-ns\/pair|x-off)$/
      if (name ~ /^BenchmarkRelocationThroughput/) return unit ~ /^(reloc-GB\/s|x-floor)$/
      if (name ~ /^BenchmarkPlanCommit/) return unit ~ /^(ns\/move|x-floor)$/
      if (name ~ /^BenchmarkReadSnapshot/) return unit ~ /^(best-ms|x-cpython|B\/op)$/
      if (name ~ /^BenchmarkReplay/) return unit ~ /^(events\/s|x-floor)$/
      return 0
    }
    function num(v) {
      if (v >= 1e6) return sprintf("%.2f M", v / 1e6)
      if (v >= 1e4) return sprintf("%.0f", v)
      return sprintf("%.3g", v)
    }
    /^Benchmark/ {
      name = $1; sub(/-[0-9]+$/, "", name)
      family = name; sub(/\/.*/, "", family)
      if (!(name in seen)) { seen[name] = 1; order[++n] = name; fam[name] = family }
      for (i = 3; i < NF; i += 2) {
        unit = $(i + 1); v = $i + 0
        if (!wanted(name, unit)) continue
        k = name SUBSEP unit
        if (!(k in lo) || v < lo[k]) lo[k] = v
        if (!(k in hi) || v > hi[k]) hi[k] = v
        if (!((name, unit) in listed)) { listed[name, unit] = 1; units[name] = units[name] " " unit }
      }
    }
    END {
      for (j = 1; j <= n; j++) {
        name = order[j]; m = split(units[name], us, " "); first = 1
        newfam = !(fam[name] in shown); shown[fam[name]] = 1
        for (u = 1; u <= m; u++) {
          k = name SUBSEP us[u]
          printf "| %s | %s | %s | %s | %s |\n", (first ? "`" substr(name, 10) "`" : ""), (first && newfam ? what(name) : ""), us[u], num(lo[k]), num(hi[k])
          first = 0
        }
      }
    }' "$raw"
  echo
  echo "The commands, each with \`-count 3\`: \`go test -run '^\$' -bench 'AllocFree\$|PairAmongLiveBuffers|HistoryRecording|RelocationThroughput|ManyGoroutines' -benchmem .\`;"
  echo "\`-bench PlanCommit -benchtime 10x ./internal/pool\`; \`-bench 'ReadSnapshot\$' -benchmem ./internal/analysis/trace\` (x-cpython needs \`python3\`);"
  echo "\`-bench 'Replay/.*/(adaptive|adaptive-pages|torch)\$' -benchtime 10x ./internal/analysis/compare\`. The CUDA and Vulkan figures come from the"
  echo "GPU kit (\`scripts/gpu-kit.sh\`, [docs/guide/cuda.md](../guide/cuda.md)) on a machine with a GPU."
} >"$out"
echo "wrote $out" >&2
