#!/usr/bin/env bash
# gpu-check.sh: check the cuda backend on a machine with an NVIDIA GPU, in
# under 5 minutes on an H200.
#
#   1. prints the driver and device;
#   2. runs the cuda package's tests with GPUMEM_REQUIRE_CUDA=1, so the
#      real-driver tests run (a missing driver is a failure, not a skip);
#   3. runs, verbosely, the tests that matter most on a GPU: a graph replayed
#      after a relocation, and user modules (hand-written PTX JIT-compiled
#      by the driver, kernels launched inside ops with addresses and scalars
#      of every width, cross-stream order, a captured graph launched after a
#      relocation, the JIT's log for broken PTX, refused argument lists);
#   4. measures, in one benchmark run, each figure against its floor
#      measured in the same run: relocation throughput through
#      Device.Cleanup against cuMemcpyDtoD of the same bytes; a steady
#      Alloc + Free against raw cuMemAlloc + cuMemFree; a graph launch of a
#      16-op step against the same ops enqueued directly;
#   5. runs examples/cuda (SAXPY and a reduction in PTX, relocations
#      between steps, a captured step launched 200 times, results checked
#      on the host);
#   6. when a Vulkan device enumerates (NVIDIA's driver ships one), runs the
#      vulkan tests with CI=true, its benchmarks and examples/vulkan;
#   7. prints the figures: each against its floor, and the example's check.
#
# It exits non-zero when a step fails, when the example's check fails, or
# when a figure misses its target: relocation of the largest size at least
# 0.8 of the cuMemcpyDtoD throughput (and, on an H200, at least 1.5e12
# B/s); a graph launch no slower than the direct launches (x-floor <= 1).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export GPUMEM_REQUIRE_CUDA=1
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

echo "== driver and device"
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv
else
	echo "nvidia-smi not found (the tests below still load libcuda.so.1)"
fi
go version

echo
echo "== cuda tests against the real driver (GPUMEM_REQUIRE_CUDA=1)"
timeout 180 go test -race -count=1 ./cuda/...

echo
echo "== graph replay after a relocation and user modules, on the GPU"
timeout 90 go test -count=1 -v \
	-run 'TestGraphReplayAfterRelocation/real|TestUserKernelInACapturedGraphLaunchedAfterARelocation/real|TestJITFailureReturnsTheLog/real' \
	./cuda/ | grep -E '^(=== RUN|--- |\s+---|ok|FAIL|PASS)'

echo
echo "== benchmarks"
timeout 150 go test -count=1 -run '^$' -bench 'RelocationThroughput|AllocFree|GraphReplayAfterRelocation|GraphLaunch' \
	-benchtime 3x ./cuda/ | tee "$out/bench.txt"

echo
echo "== examples/cuda"
timeout 60 go run ./examples/cuda -launches 200 | tee "$out/example.txt"

echo
echo "== vulkan backend on the machine's Vulkan driver (NVIDIA ships one)"
# The vulkan tests and examples/vulkan on the GPU's Vulkan device (discrete
# GPUs are picked first; GPUMEM_VULKAN_DEVICE picks another), with CI=true
# so a device that does not open fails instead of skipping, then the
# vulkan benchmarks (figures printed, not gated: the targets are the cuda
# ones below). Skipped when the loader enumerates no Vulkan device.
if go run ./cmd/gpumem info 2>/dev/null | grep -q '^vulkan available'; then
	go run ./cmd/gpumem info | sed -n '/^vulkan/,$p'
	CI=true timeout 180 go test -race -count=1 ./vulkan/ ./examples/vulkan/
	timeout 120 go test -count=1 -run '^$' -bench . -benchtime 5x ./vulkan/ | grep -E '^(Benchmark|ok|FAIL)' | tee "$out/vulkan-bench.txt"
	timeout 60 go run ./examples/vulkan -launches 200 | tee "$out/vulkan-example.txt"
	grep -q 'every result checked on the host: ok$' "$out/vulkan-example.txt"
else
	echo "no Vulkan device enumerated here (gpumem info says why); vulkan checks skipped"
fi

echo
echo "== figures"
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 || true)"
awk -v gpu="$gpu" '
	# value of the metric whose unit is u on a benchmark line
	function metric(u,   i) { for (i = 2; i <= NF; i++) if ($i == u) return $(i - 1); return "" }
	/^BenchmarkRelocationThroughput\// {
		name = $1; sub(/-[0-9]+$/, "", name)
		printf "%-45s relocation %.3g B/s, cuMemcpyDtoD %.3g B/s, ratio %.2f\n", name, metric("B/s"), metric("floor-B/s"), metric("x-floor")
		last = name; bps = metric("B/s") + 0; ratio = metric("x-floor") + 0
	}
	/^BenchmarkAllocFree\// {
		name = $1; sub(/-[0-9]+$/, "", name)
		printf "%-45s gpumem %s ns/op, raw cuMemAlloc+cuMemFree %s ns/op, ratio %.3g\n", name, metric("ns/op"), metric("raw-ns/op"), metric("x-floor")
	}
	/^BenchmarkGraphReplayAfterRelocation/ { printf "%-45s %s ns/op (bytes checked)\n", "GraphReplayAfterRelocation", metric("ns/op") }
	/^BenchmarkGraphLaunch/ {
		printf "%-45s graph %s ns/op, the same 16 ops launched directly %s ns/op, ratio %.3g\n", "GraphLaunch", metric("ns/op"), metric("direct-ns/op"), metric("x-floor")
		graph = metric("x-floor") + 0; seen_graph = 1
	}
	/^example check:/ { example = $0 }
	END {
		if (last == "") { print "no relocation figures"; exit 1 }
		fail = 0
		if (ratio < 0.8) { printf "MISS: %s relocates at %.2f of cuMemcpyDtoD, target 0.8\n", last, ratio; fail = 1 }
		if (gpu ~ /H200/ && bps < 1.5e12) { printf "MISS: %s relocates %.3g B/s on an H200, target 1.5e12\n", last, bps; fail = 1 }
		if (!seen_graph) { print "MISS: no graph launch figure"; fail = 1 }
		else if (graph > 1) { printf "MISS: a graph launch costs %.2f of the direct launches, target <= 1\n", graph; fail = 1 }
		if (example !~ /ok$/) { print "MISS: examples/cuda did not report its check"; fail = 1 }
		else printf "%-45s %s\n", "examples/cuda", example
		if (!fail) printf "targets met (relocation by %s)\n", last
		exit fail
	}' "$out/bench.txt" "$out/example.txt"
