#!/usr/bin/env bash
# gpu-check.sh: the GPU day's checks, from the kit that scripts/gpu-kit.sh
# builds. It runs with bash and the kit alone: no Go, no network.
#
#   scripts/gpu-kit.sh KIT              # on a development machine
#   bash KIT/gpu-check.sh RESULTS       # on the GPU machine, first thing
#
# It prints the driver and device, then runs each step with a timeout so
# that a failing or hanging step does not stop the others, all within a
# budget of 8 minutes (GPU_CHECK_BUDGET seconds, default 470): the real
# driver's benchmarks, each against its raw floor measured in the same run
# (Alloc+Free against cuMemAlloc/cuMemFree and vkAllocateMemory/
# vkFreeMemory at 4 KiB, 1 MiB and 64 MiB; relocation against
# cuMemcpyDtoD and vkCmdCopyBuffer; Write/Read against raw transfers; a
# graph launch against the same ops launched directly), the cuda tests with
# GPUMEM_REQUIRE_CUDA=1, the vulkan tests on the machine's Vulkan driver
# through the kit's loader (with the kit's validation layer and CI=true:
# a missing device fails), streams on distinct queues, a real out-of-memory
# through each backend, the shadow model on Vulkan, the examples with their
# checks, and last torch-check.py (PyTorch on the card judging gpumem
# advise's verdicts) with the time left (GPU_CHECK_TORCH_SECONDS, default
# 170, are kept for it when python3 imports torch and sees a GPU).
#
# Without a CUDA driver the CUDA steps are skipped with the reason (the
# cuda test binary still runs its fake-driver tests, so a broken kit
# shows); without a Vulkan device the Vulkan steps are. Targets, judged on a
# GPU only (lavapipe's figures are printed, not judged): Vulkan Alloc+Free
# at most 0.1 of vkAllocateMemory+vkFreeMemory at 4 KiB and 1 MiB;
# relocation of the largest size at least 0.8 of the raw copy (CUDA on an
# H200 also at least 1.5e12 B/s); a CUDA graph launch no slower than the
# direct launches. A missed target fails its step.
#
# RESULTS gets results.json (each step: name, status pass/fail/skip,
# reason, figures, seconds, its log inside logs.tar.gz), summary.txt (the
# same as text, with torch-check's table) and logs.tar.gz (every step's
# log, torch-check's JSON, table and advise output; the snapshots too when
# small). Exit status 0 when no step failed, 1 otherwise, 2 on a usage
# error or a kit that cannot be unpacked.
#
# Options: -quick (or GPU_CHECK_QUICK=1) shortens every step (CI runs it so
# on every change, with Go off the PATH); -list prints the steps and what
# each runs, and exits. GPU_CHECK_WORK=DIR unpacks there and keeps it (a
# fresh temporary folder, removed at the end, otherwise).
#
# Step selection, for a run with little device time: -only A,B (or
# GPU_CHECK_STEPS="A B") runs only those steps, -skip A,B (or
# GPU_CHECK_SKIP="A B") leaves those out; names may be shell patterns
# (vulkan-*), commas or spaces separate them, a name that matches no step
# is a usage error. The device step always runs; the others are recorded
# as skipped, "not selected", and torch-check keeps no time back unless it
# is selected (nor does the device step import torch). -list marks what
# a selection leaves out.
#
# Vulkan: the device step probes the backends with bin/gpumem info. When
# Vulkan does not come up (or finds only a CPU device beside an NVIDIA
# GPU), it logs the loader's own account (VK_LOADER_DEBUG=all), the
# libraries the process looked for and did not find (LD_DEBUG=files), the
# NVIDIA files, device nodes and manifests, then tries variants of the
# environment, a cheap probe each, and keeps the first that gives a GPU
# for every later step (figure vulkan_variant; logs/device-vkv-*.txt hold
# each probe): egl (the kit's glvnd libEGL.so.1/libGLX.so.0, which NVIDIA's
# ICD opens at run time, and an NVIDIA EGL vendor file), egl-icd
# (libEGL_nvidia.so.0 as the ICD), no-layers, abs-icd (the ICD's library
# by absolute path), no-glvnd, glvnd-first, system-loader, default-search,
# glx-vendor, and two combinations. Where none finds the GPU, the first
# that found a CPU device is kept (figure vulkan_note says so); where none
# finds any, the Vulkan steps skip with the loader's own message.
# GPU_CHECK_NVIDIA_ROOT (default
# /usr/local/nvidia) is where NVIDIA's libraries and ICD are looked for;
# GPU_CHECK_EXPECT_GPU=1 or 0 overrides whether a Vulkan GPU is expected
# (default: when nvidia-smi lists one).
set -uo pipefail

quick="${GPU_CHECK_QUICK:-0}"
[ "$quick" = 1 ] || quick=0
list=0
results=""
sel_only="${GPU_CHECK_STEPS:-}"
sel_skip="${GPU_CHECK_SKIP:-}"
usage_line="usage: gpu-check.sh [-quick] [-only STEP,...] [-skip STEP,...] RESULTS | -list"
while [ $# -gt 0 ]; do
	a=$1
	shift
	case "$a" in
	-quick | --quick) quick=1 ;;
	-list | --list) list=1 ;;
	-only | --only | -skip | --skip)
		if [ $# -eq 0 ]; then
			echo "gpu-check: $a needs a list of steps ($usage_line)" >&2
			exit 2
		fi
		case "$a" in
		*only) sel_only="$sel_only $1" ;;
		*) sel_skip="$sel_skip $1" ;;
		esac
		shift
		;;
	-only=* | --only=*) sel_only="$sel_only ${a#*=}" ;;
	-skip=* | --skip=*) sel_skip="$sel_skip ${a#*=}" ;;
	-h | -help | --help)
		sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	-*)
		echo "gpu-check: unknown option $a ($usage_line)" >&2
		exit 2
		;;
	*) results="$a" ;;
	esac
done
# The patterns as arrays (read -a: no globbing against the files here).
read -r -a only_pats <<<"${sel_only//,/ }"
read -r -a skip_pats <<<"${sel_skip//,/ }"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# ---------------------------------------------------------------- steps
#
# Each step: name, timeout in seconds (full, quick), function, and what it
# runs (for -list and MANIFEST.txt). The order is the day's priority: the
# Vulkan figures and checks that waited longest first, torch-check last.
STEPS=(
	"device|150|150|s_device|nvidia-smi; bin/gpumem info; python3 -c 'import torch' (the driver, the device, the backends, PyTorch); when Vulkan fails, the loader's diagnosis and the environment variants (always runs)"
	"vulkan-bench-allocfree|60|30|s_vk_allocfree|test/vulkan.test -test.bench '^BenchmarkAllocFree\$' -test.benchtime 1s (quick 20000x): Alloc+Free against vkAllocateMemory+vkFreeMemory at 4 KiB, 1 MiB, 64 MiB"
	"vulkan-queues|60|30|s_vk_queues|test/vulkan.test -test.run '^TestStreamsOnDistinctQueuesOrderCrossStreamUsesBySemaphores\$' -test.v: streams on distinct VkQueues, ordered by semaphores"
	"vulkan-oom|90|30|s_vk_oom|bin/oomcheck -backend vulkan: fill the device until the budget or the driver refuses; a second backend's memory makes the driver refuse; recovery"
	"vulkan-tests|150|60|s_vk_tests|test/vulkan.test -test.count=1 -test.v (quick -test.short), CI=true with the validation layer; again without it if that run fails"
	"cuda-tests|150|120|s_cuda_tests|GPUMEM_REQUIRE_CUDA=1 test/cuda.test -test.count=1 -test.v (quick -test.short); without a driver, a few fake-driver tests only (the kit's own check)"
	"cuda-bench-allocfree|60|30|s_cuda_allocfree|test/cuda.test -test.bench '^BenchmarkAllocFree\$' -test.benchtime 1s (quick 20000x): Alloc+Free against cuMemAlloc+cuMemFree at 4 KiB, 1 MiB, 64 MiB"
	"cuda-bench-relocation|150|60|s_cuda_relocation|test/cuda.test -test.bench '^BenchmarkRelocationThroughput\$' -test.benchtime 3x (quick 1x): Device.Cleanup's relocation against cuMemcpyDtoD, 1, 4 and 16 GiB"
	"cuda-bench-transfers|90|40|s_cuda_transfers|test/cuda.test -test.bench '^BenchmarkTransfers\$' -test.benchtime 3x (quick 1x): Write/Read against cuMemcpyHtoD/DtoH, 1 MiB, 64 MiB, 1 GiB"
	"cuda-bench-graph|60|30|s_cuda_graph|test/cuda.test -test.bench '^Benchmark(GraphLaunch|GraphReplayAfterRelocation)\$' -test.benchtime 20x (quick 2x): a 16-op graph against the ops launched directly"
	"cuda-oom|120|30|s_cuda_oom|bin/oomcheck -backend cuda: fill the device until the driver refuses; a second device on the GPU holding a quarter makes the driver refuse; recovery"
	"example-cuda|60|30|s_ex_cuda|bin/example-cuda -launches 200 (quick 20): SAXPY and a reduction in PTX, relocations, a captured step; results checked on the host"
	"example-vulkan|60|30|s_ex_vulkan|bin/example-vulkan -launches 200 (quick 20): the same in SPIR-V on the Vulkan device"
	"vulkan-bench-relocation|120|40|s_vk_relocation|test/vulkan.test -test.bench '^BenchmarkRelocationThroughput\$' -test.benchtime 2x (quick: 16MiB, 1x): relocation against vkCmdCopyBuffer; 256 MiB and 1 GiB on GPUs"
	"vulkan-bench-transfers|90|40|s_vk_transfers|test/vulkan.test -test.bench '^BenchmarkTransfers\$' -test.benchtime 3x (quick: 1MiB, 1x): Write/Read against raw transfers (mapped copies, or staging + vkCmdCopyBuffer)"
	"vulkan-bench-graph|60|30|s_vk_graph|test/vulkan.test -test.bench '^BenchmarkGraphLaunch\$' -test.benchtime 50x (quick 5x): a recorded 16-dispatch step against the same recorded each time"
	"shadow-model-vulkan|120|40|s_shadow|test/gpumem.test -test.run '^TestShadowModelOnVulkan\$' -test.v (quick -test.short), validated as vulkan-tests is"
	"example-basic|30|30|s_ex_basic|bin/example-basic: the host device, relocations, every byte checked"
	"vulkan-bench-staging|60|0|s_vk_staging|test/vulkan.test -test.bench '^BenchmarkStagingTransfers\$' -test.benchtime 2x (not in quick): staging transfers, pooled and not, against memcpy"
	"torch-check|0|60|s_torch|python3 torch-check.py --gpumem bin/gpumem (quick --quick): PyTorch on the card judges gpumem advise's verdicts, with the time left"
)

# matches NAME PATTERN...: whether NAME matches one of the patterns.
matches() {
	local n=$1 p
	shift
	for p in "$@"; do
		# shellcheck disable=SC2053 # the pattern is meant to match as one
		[[ "$n" == $p ]] && return 0
	done
	return 1
}
# selected NAME: whether the step runs (-only/-skip; device always runs).
selected() {
	[ "$1" = device ] && return 0
	if [ ${#only_pats[@]} -gt 0 ] && ! matches "$1" "${only_pats[@]}"; then
		return 1
	fi
	if [ ${#skip_pats[@]} -gt 0 ] && matches "$1" "${skip_pats[@]}"; then
		return 1
	fi
	return 0
}
# A pattern that matches no step is a typo: refuse it rather than spend a
# run on the wrong steps.
step_names=()
for s in "${STEPS[@]}"; do
	step_names+=("${s%%|*}")
done
for p in ${only_pats[@]+"${only_pats[@]}"} ${skip_pats[@]+"${skip_pats[@]}"}; do
	ok=0
	for n in "${step_names[@]}"; do
		# shellcheck disable=SC2053 # the pattern is meant to match as one
		[[ "$n" == $p ]] && ok=1
	done
	if [ $ok = 0 ]; then
		echo "gpu-check: no step is named '$p' (-only/-skip, GPU_CHECK_STEPS/GPU_CHECK_SKIP); the steps: ${step_names[*]}" >&2
		exit 2
	fi
done
selection=""
if [ ${#only_pats[@]} -gt 0 ] || [ ${#skip_pats[@]} -gt 0 ]; then
	selection="${only_pats[*]:+only: ${only_pats[*]}}${only_pats[*]:+${skip_pats[*]:+; }}${skip_pats[*]:+skip: ${skip_pats[*]}}"
fi

if [ "$list" = 1 ]; then
	for s in "${STEPS[@]}"; do
		IFS='|' read -r name full q fn what <<<"$s"
		[ "$full" = 0 ] && full="the time left"
		mark=""
		selected "$name" || mark=" [not selected]"
		printf '%-24s timeout %s s (quick %s s)%s: %s\n' "$name" "$full" "$q" "$mark" "$what"
	done
	[ -z "$selection" ] || echo "(selection: $selection)"
	exit 0
fi
if [ -z "$results" ]; then
	echo "$usage_line" >&2
	exit 2
fi

# ---------------------------------------------------------------- setup

now() {
	if [ -n "${EPOCHREALTIME:-}" ]; then
		echo "${EPOCHREALTIME/,/.}"
	else
		date +%s.%N
	fi
}
t_start="$(now)"
budget="${GPU_CHECK_BUDGET:-470}"
torch_reserve="${GPU_CHECK_TORCH_SECONDS:-170}"
deadline="$(awk -v a="$t_start" -v b="$budget" 'BEGIN { printf "%.3f", a + b }')"

if [ ! -f "$here/kit.tar.gz" ]; then
	echo "gpu-check: no kit.tar.gz beside $0: build the kit first (scripts/gpu-kit.sh KIT), then run KIT/gpu-check.sh" >&2
	exit 2
fi
mkdir -p "$results" || exit 2
results="$(cd "$results" && pwd)"
if [ -n "${GPU_CHECK_WORK:-}" ]; then
	work="$GPU_CHECK_WORK"
	mkdir -p "$work" || exit 2
	work="$(cd "$work" && pwd)"
else
	work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")" || exit 2
	trap 'rm -rf "$work"' EXIT
fi
if ! tar -C "$work" -xzf "$here/kit.tar.gz" 2>"$work/unpack.err"; then
	# No tar or gzip: Python's tarfile does the same.
	if ! python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$here/kit.tar.gz" "$work"; then
		echo "gpu-check: cannot unpack $here/kit.tar.gz: $(cat "$work/unpack.err")" >&2
		exit 2
	fi
fi
K="$work/kit"
logs="$work/logs"
mkdir -p "$logs" "$work/figs"
: >"$work/steps.jsonl"

have() { command -v "$1" >/dev/null 2>&1; }

# with_timeout SECONDS CMD...: CMD, killed (its process group too) after
# SECONDS; exit status 124 then.
with_timeout() {
	local t=$1
	shift
	if have timeout; then
		timeout -k 10 "$t" "$@"
		return $?
	fi
	"$@" &
	local pid=$!
	(
		sleep "$t"
		kill -TERM "$pid" 2>/dev/null && sleep 10 && kill -KILL "$pid" 2>/dev/null
	) &
	local w=$!
	wait "$pid"
	local rc=$?
	kill "$w" 2>/dev/null
	wait "$w" 2>/dev/null
	[ $rc -eq 143 ] && rc=124
	return $rc
}

# The Vulkan loader: the kit's (Debian's libvulkan1), which finds the
# machine's ICDs; NVIDIA's lies outside the standard folders there. The
# ICD's library is found by name: NVIDIA's library folder goes on the
# path, and the kit's libGLdispatch after everything else.
# (The kit's libEGL.so.1 and libGLX.so.0, in vulkan/egl, are not on the
# path: the device step's "egl" variant adds them when Vulkan fails.)
if [ -e "$K/vulkan/lib/libvulkan.so.1" ]; then
	export GPUMEM_LIBVULKAN="$K/vulkan/lib/libvulkan.so.1"
fi
nv_root="${GPU_CHECK_NVIDIA_ROOT:-/usr/local/nvidia}"
nv_icd="$nv_root/share/vulkan/icd.d/nvidia_icd.json"
if [ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ] && [ -e "$nv_icd" ]; then
	export VK_DRIVER_FILES="$nv_icd" VK_ICD_FILENAMES="$nv_icd"
fi
ldp="${LD_LIBRARY_PATH:-}"
for d in "$nv_root/lib64" "$nv_root/lib" "$K/vulkan/lib" "$K/vulkan/glvnd"; do
	if [ -d "$d" ] && [[ ":$ldp:" != *":$d:"* ]]; then
		ldp="${ldp:+$ldp:}$d"
	fi
done
export LD_LIBRARY_PATH="$ldp"
# The validation layer: the kit's, else the machine's.
validation=""
if [ -e "$K/vulkan/layers/VkLayer_khronos_validation.json" ]; then
	export VK_ADD_LAYER_PATH="$K/vulkan/layers${VK_ADD_LAYER_PATH:+:$VK_ADD_LAYER_PATH}"
	validation="the kit's"
elif [ -e /usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json ]; then
	validation="the machine's"
fi
unset CI

# ---------------------------------------------------------------- records

json_str() {
	local s=$1
	s="${s//\\/\\\\}"
	s="${s//\"/\\\"}"
	s="${s//$'\n'/\\n}"
	s="${s//$'\t'/\\t}"
	s="${s//$'\r'/}"
	s="$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037')"
	printf '"%s"' "$s"
}

# fig NAME VALUE: a figure of the running step.
fig() { printf '%s\t%s\n' "$1" "$(printf '%s' "$2" | tr '\t\n' '  ')" >>"$FIGS"; }
# fig_get NAME: the figure's value ("" when absent).
fig_get() { awk -F'\t' -v k="$1" '$1 == k { v = $2 } END { print v }' "$FIGS"; }

# figs_json FILE: the figures as a JSON object (numbers bare).
figs_json() {
	local first=1 k v
	printf '{'
	while IFS=$'\t' read -r k v; do
		[ -n "$k" ] || continue
		[ $first = 1 ] || printf ', '
		first=0
		json_str "$k"
		printf ': '
		if [[ "$v" =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]]; then
			printf '%s' "$v"
		else
			json_str "$v"
		fi
	done <"$1"
	printf '}'
}

# pass | fail WHY | skip WHY: the running step's outcome (the first fail
# stands; a later pass does not undo it).
pass() { [ -n "$STATUS" ] || STATUS=pass; }
fail() {
	if [ "$STATUS" != fail ]; then
		STATUS=fail
		REASON="$*"
	else
		REASON="$REASON; $*"
	fi
}
skip() {
	[ "$STATUS" = fail ] && return
	STATUS=skip
	REASON="$*"
}

elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
left() { awk -v d="$deadline" -v n="$(now)" 'BEGIN { printf "%d", d - n }'; }

TORCH_OK=0
run_step() {
	local name=$1 limit=$2 fn=$3
	local reserve=0 t0 secs allowed
	if [ "$TORCH_OK" = 1 ] && [ "$name" != torch-check ] && selected torch-check; then
		reserve="$torch_reserve"
	fi
	# 10 s stay for the results at the end.
	allowed=$(($(left) - reserve - 10))
	if [ "$limit" -gt 0 ] && [ "$allowed" -gt "$limit" ]; then
		allowed=$limit
	fi
	STATUS=""
	REASON=""
	FIGS="$work/figs/$name.tsv"
	LOG="$logs/$name.txt"
	: >"$FIGS"
	: >"$LOG"
	t0="$(now)"
	if [ "$allowed" -lt 10 ]; then
		skip "no time left in the ${budget}s budget"
		allowed=0
	else
		STEP_TIMEOUT=$allowed
		"$fn" >>"$LOG" 2>&1
		[ -n "$STATUS" ] || fail "the step set no outcome"
	fi
	secs="$(elapsed "$t0")"
	{
		printf '{"name": %s, "status": %s, "reason": %s, "seconds": %s, "timeout": %s, "figures": ' \
			"$(json_str "$name")" "$(json_str "$STATUS")" "$(json_str "$REASON")" "$secs" "${allowed}"
		figs_json "$FIGS"
		printf ', "log": %s}\n' "$(json_str "logs/$name.txt")"
	} >>"$work/steps.jsonl"
	printf '%-24s %-4s %6ss  %s\n' "$name" "$STATUS" "$secs" "$REASON"
	if [ "$STATUS" = fail ] && [ -s "$LOG" ]; then
		tail -n 15 "$LOG" | sed 's/^/    | /'
	fi
}

# run_in DIR SECONDS CMD...: CMD in DIR with a timeout; its exit status,
# with a note in the log when the timeout killed it.
run_in() {
	local dir=$1 t=$2 rc
	shift 2
	echo "\$ (cd ${dir#"$K"/} && $*)  [timeout ${t}s]"
	(cd "$dir" && with_timeout "$t" "$@")
	rc=$?
	if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
		echo "gpu-check: timed out after ${t}s"
	fi
	return $rc
}

# skip_why LOG: the message of the first skip in a -test.v log (a test's
# follows its "--- SKIP" line, a benchmark's comes before it).
skip_why() {
	awk '/^ *--- SKIP: / { if (prev != "") { print prev; exit } want = 1; next }
		want && /^ +[^ ]/ { print; exit }
		/^ +[^ -]/ { prev = $0; next } { prev = "" }' "$1" | sed 's/^ *//' | cut -c1-300
}

# test_outcome RC LOG: the outcome of a Go test binary's -test.v run:
# counts of top-level tests and the failed ones.
test_outcome() {
	local rc=$1 log=$2 passed failed skipped names
	passed=$(grep -c '^--- PASS: ' "$log")
	failed=$(grep -c '^--- FAIL: ' "$log")
	skipped=$(grep -c '^--- SKIP: ' "$log")
	fig tests_passed "$passed"
	fig tests_failed "$failed"
	fig tests_skipped "$skipped"
	names="$(grep '^--- FAIL: ' "$log" | awk '{ print $3 }' | head -n 8 | paste -sd, -)"
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		fail "timed out after ${STEP_TIMEOUT}s (${passed} passed before${names:+; failed: $names})"
	elif [ "$rc" -ne 0 ]; then
		if [ -n "$names" ]; then
			fail "$failed failed: $names"
		else
			fail "exit status $rc: $(grep -v '^\s*$' "$log" | tail -n 1 | cut -c1-200)"
		fi
	elif [ "$passed" -eq 0 ] && [ "$skipped" -gt 0 ]; then
		skip "every test skipped: $(skip_why "$log")"
	else
		pass
	fi
}

# bench_figures LOG: every benchmark line's metrics as figures
# "Name/sub:unit" (the -N suffix dropped), and the outcome.
bench_figures() {
	local rc=$1 log=$2 n
	awk '/^Benchmark/ && NF >= 4 {
		name = $1; sub(/^Benchmark/, "", name); sub(/-[0-9]+$/, "", name)
		for (i = 3; i < NF; i += 2) printf "%s:%s\t%s\n", name, $(i + 1), $i
	}' "$log" >>"$FIGS"
	n=$(grep -c '^Benchmark.*[0-9] ns/op\|^Benchmark.*[0-9] [a-zA-Z/-]*x-floor' "$log")
	fig benchmarks "$n"
	if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
		fail "timed out after ${STEP_TIMEOUT}s ($n benchmark lines before)"
	elif [ "$rc" -ne 0 ] || grep -q '^--- FAIL' "$log"; then
		fail "benchmark failed: $(grep -A3 '^--- FAIL' "$log" | grep -v '^--- FAIL' | head -n 1 | sed 's/^ *//' | cut -c1-200)"
	elif [ "$n" -eq 0 ]; then
		skip "no benchmark ran: $(skip_why "$log")"
	else
		pass
	fi
}

# target NAME OK MESSAGE: a target judged on a GPU; missed fails the step.
target() {
	local name=$1 ok=$2
	shift 2
	if [ "$ok" = 1 ]; then
		fig "target:$name" met
	else
		fig "target:$name" missed
		fail "target missed: $*"
	fi
}

# le A B / ge A B: numeric comparisons (awk), false when A is empty.
le() { [ -n "$1" ] && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }
ge() { [ -n "$1" ] && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 >= b + 0) }'; }

# ---------------------------------------------------------------- the steps

CUDA_OK=0
CUDA_WHY="not probed"
VK_OK=0
VK_WHY="not probed"
VK_GPU=0
GPU_NAME=""

# ---------------------------------------------------------------- Vulkan: probe, diagnosis, variants

# vk_env_line: the environment that decides which loader, driver and
# libraries a Vulkan probe gets.
vk_env_line() {
	local v
	for v in GPUMEM_LIBVULKAN VK_DRIVER_FILES VK_ICD_FILENAMES VK_ADD_DRIVER_FILES VK_ADD_LAYER_PATH VK_LAYER_PATH \
		VK_INSTANCE_LAYERS VK_LOADER_LAYERS_ENABLE VK_LOADER_LAYERS_DISABLE __EGL_VENDOR_LIBRARY_DIRS \
		__EGL_VENDOR_LIBRARY_FILENAMES __GLX_VENDOR_LIBRARY_NAME XDG_DATA_DIRS LD_LIBRARY_PATH; do
		[ -n "${!v:-}" ] && printf '%s=%s\n' "$v" "${!v}"
	done
}

# vk_device_name INFO: the device gpumem info's Vulkan line chose.
vk_device_name() { sed -n 's/^vulkan *available: //; s/ (device [0-9]*, .*//p' <<<"$1" | head -n 1; }

# vk_chosen_is_gpu INFO: whether the device gpumem info chose is not a
# CPU (lavapipe, llvmpipe).
vk_chosen_is_gpu() {
	local idx
	idx="$(sed -n 's/^vulkan *available: .*(device \([0-9]*\), .*/\1/p' <<<"$1" | head -n 1)"
	[ -n "$idx" ] || return 1
	! grep -q "^ *device $idx:.*(CPU)" <<<"$1"
}

# vk_good INFO: Vulkan is available, on a GPU where one is expected.
vk_good() {
	grep -q '^vulkan *available' <<<"$1" || return 1
	[ "$VK_EXPECT_GPU" = 1 ] && ! vk_chosen_is_gpu "$1" && return 1
	return 0
}

# vk_parse INFO: VK_OK, VK_WHY, VK_GPU and the device figures from a
# gpumem info output.
vk_parse() {
	local info=$1
	if grep -q '^vulkan *available' <<<"$info"; then
		VK_OK=1
		VK_WHY=""
		VK_GPU=0
		vk_chosen_is_gpu "$info" && VK_GPU=1
		fig vulkan_device "$(vk_device_name "$info")"
		fig vulkan_compute_queues "$(echo "$info" | sed -n 's/.*compute queues \([0-9]*\).*/\1/p' | head -n 1)"
	else
		VK_OK=0
		VK_GPU=0
		VK_WHY="$(echo "$info" | sed -n 's/^vulkan *not available: //p' | head -n 1)"
		[ -n "$VK_WHY" ] || VK_WHY="gpumem info names no Vulkan backend"
		if [ ! -e "$K/vulkan/lib/libvulkan.so.1" ]; then
			VK_WHY="$VK_WHY (the kit carries no Vulkan loader: $(grep 'libvulkan1' "$here/MANIFEST.txt" | head -n 1 | sed 's/^ *//'))"
		fi
	fi
}

# ldconfig_p: ldconfig -p, wherever ldconfig is.
ldconfig_p() {
	local l
	for l in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
		if have "$l" || [ -x "$l" ]; then
			"$l" -p 2>/dev/null
			return
		fi
	done
}

# resolve_lib NAME: where the dynamic linker would find NAME (a file
# name): LD_LIBRARY_PATH's folders, then ldconfig's cache ("" if nowhere).
resolve_lib() {
	local n=$1 d
	case "$n" in
	/*)
		[ -e "$n" ] && echo "$n"
		return
		;;
	esac
	local IFS=:
	for d in ${LD_LIBRARY_PATH:-}; do
		if [ -n "$d" ] && [ -e "$d/$n" ]; then
			echo "$d/$n"
			return
		fi
	done
	ldconfig_p | awk -v n="$n" '$1 == n { print $NF; exit }'
}

# ldp_drop PATH DIR...: the colon list PATH without those folders.
ldp_drop() {
	local list=$1 out="" d x keep
	shift
	local IFS=:
	for d in $list; do
		keep=1
		for x in "$@"; do
			[ "$d" = "$x" ] && keep=0
		done
		[ -n "$d" ] && [ $keep = 1 ] && out="${out:+$out:}$d"
	done
	printf '%s' "$out"
}

# icd_json: the ICD manifest the loader is pointed at now.
icd_json() {
	local f="${VK_DRIVER_FILES:-${VK_ICD_FILENAMES:-}}"
	f="${f%%:*}"
	[ -n "$f" ] || f="$nv_icd"
	echo "$f"
}
# icd_lib JSON: its library_path.
icd_lib() { sed -n 's/.*"library_path" *: *"\([^"]*\)".*/\1/p' "$1" 2>/dev/null | head -n 1; }

# icd_copy TAG LIB: a copy of the ICD manifest naming LIB, in a folder of
# its own; prints its path.
icd_copy() {
	local tag=$1 lib=$2 src dst
	src="$(icd_json)"
	mkdir -p "$work/vkv/$tag"
	dst="$work/vkv/$tag/nvidia_icd.json"
	if [ -e "$src" ] && grep -q '"library_path"' "$src"; then
		sed "s#\"library_path\" *: *\"[^\"]*\"#\"library_path\": \"$lib\"#" "$src" >"$dst"
	else
		printf '{\n    "file_format_version" : "1.0.0",\n    "ICD": {\n        "library_path": "%s",\n        "api_version" : "1.3.0"\n    }\n}\n' "$lib" >"$dst"
	fi
	echo "$dst"
}

# The variants, in the order tried. Each is the environment as set above
# with one change (the last two combine them), built by vk_variant.
VK_VARIANTS=(as-set egl egl-icd no-layers abs-icd no-glvnd glvnd-first system-loader default-search glx-vendor all all-egl-icd)

# existing PATH...: those of the paths (globs expanded) that exist.
existing() {
	local f
	for f in "$@"; do
		[ -e "$f" ] && printf '%s\n' "$f"
	done
	return 0
}

# what_add TEXT: a clause of the variant's description.
what_add() { VKV_WHAT="${VKV_WHAT:+$VKV_WHAT; }$*"; }

# v_egl: NVIDIA's ICD library opens libEGL.so.1 (glvnd) while it starts
# and, not finding it, gives the loader no vkCreateInstance: the kit's
# libEGL.so.1 and libGLX.so.0 where the machine has none, and an NVIDIA
# EGL vendor file where the machine has none in glvnd's folders.
v_egl() {
	local did=0 vend eglso
	if [ -e "$K/vulkan/egl/libEGL.so.1" ]; then
		local missing="" l
		for l in libEGL.so.1 libGLX.so.0; do
			[ -n "$(resolve_lib "$l")" ] || missing="$missing${missing:+ and }$l"
		done
		if [ -n "$missing" ]; then
			V_LDP="${V_LDP:+$V_LDP:}$K/vulkan/egl"
			what_add "the kit's glvnd libEGL.so.1 and libGLX.so.0 at the end of LD_LIBRARY_PATH ($missing not here)"
			did=1
		else
			what_add "libEGL.so.1 and libGLX.so.0 are here already ($(resolve_lib libEGL.so.1))"
		fi
	else
		what_add "the kit carries no libEGL.so.1"
	fi
	if [ -z "${__EGL_VENDOR_LIBRARY_DIRS:-}${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] &&
		[ -z "$(existing /usr/share/glvnd/egl_vendor.d/*nvidia*.json /etc/glvnd/egl_vendor.d/*nvidia*.json)" ]; then
		vend="$(existing "$nv_root"/share/glvnd/egl_vendor.d/*nvidia*.json | head -n 1)"
		eglso="$(resolve_lib libEGL_nvidia.so.0)"
		if [ -n "$vend" ]; then
			VKV_SET+=("__EGL_VENDOR_LIBRARY_FILENAMES=$vend")
			what_add "glvnd's EGL vendor file: $vend"
			did=1
		elif [ -n "$eglso" ]; then
			mkdir -p "$work/vkv/egl-vendor"
			vend="$work/vkv/egl-vendor/10_nvidia.json"
			printf '{\n    "file_format_version" : "1.0.0",\n    "ICD" : {\n        "library_path" : "libEGL_nvidia.so.0"\n    }\n}\n' >"$vend"
			VKV_SET+=("__EGL_VENDOR_LIBRARY_FILENAMES=$vend")
			what_add "an EGL vendor file naming libEGL_nvidia.so.0 ($eglso)"
			did=1
		else
			what_add "no NVIDIA EGL vendor file and no libEGL_nvidia.so.0 here"
		fi
	fi
	[ $did = 1 ]
}

# v_egl_icd: libEGL_nvidia.so.0 as the ICD (it exports the same vk_icd*
# entry points as libGLX_nvidia.so.0, without GLX).
v_egl_icd() {
	local eglso f
	eglso="$(resolve_lib libEGL_nvidia.so.0)"
	if [ -z "$eglso" ]; then
		what_add "no libEGL_nvidia.so.0 here"
		return 1
	fi
	f="$(icd_copy "$VKV_NAME" "$eglso")"
	VKV_SET+=("VK_DRIVER_FILES=$f" "VK_ICD_FILENAMES=$f")
	what_add "the ICD manifest copied to name $eglso"
}

# v_abs_icd: the ICD manifest's library by absolute path.
v_abs_icd() {
	local json lib path f
	json="$(icd_json)"
	lib="$(icd_lib "$json")"
	case "$lib" in
	"")
		what_add "no ICD manifest with a library_path ($json)"
		return 1
		;;
	/*)
		what_add "the ICD's library_path is absolute already ($lib)"
		return 1
		;;
	esac
	path="$(resolve_lib "$lib")"
	if [ -z "$path" ]; then
		what_add "$lib is nowhere on LD_LIBRARY_PATH or in ldconfig's cache"
		return 1
	fi
	f="$(icd_copy "$VKV_NAME" "$path")"
	VKV_SET+=("VK_DRIVER_FILES=$f" "VK_ICD_FILENAMES=$f")
	what_add "the ICD manifest copied with library_path $path"
}

# v_no_layers: no layer of the kit's and no implicit layer (validation
# off for the later steps).
v_no_layers() {
	VKV_UNSET+=(VK_ADD_LAYER_PATH VK_LAYER_PATH VK_INSTANCE_LAYERS VK_LOADER_LAYERS_ENABLE)
	VKV_SET+=("VK_LOADER_LAYERS_DISABLE=~implicit~")
	VKV_NO_VALIDATION=1
	what_add "no validation layer (VK_ADD_LAYER_PATH unset), implicit layers disabled"
}

# v_glvnd_first: the kit's libGLdispatch (and libEGL, when added) first on
# LD_LIBRARY_PATH.
v_glvnd_first() {
	local first="$K/vulkan/glvnd" rest
	if [ ! -d "$K/vulkan/glvnd" ]; then
		what_add "the kit carries no glvnd folder"
		return 1
	fi
	[[ ":$V_LDP:" == *":$K/vulkan/egl:"* ]] && first="$first:$K/vulkan/egl"
	rest="$(ldp_drop "$V_LDP" "$K/vulkan/glvnd" "$K/vulkan/egl")"
	V_LDP="$first${rest:+:$rest}"
	what_add "the kit's glvnd libraries first on LD_LIBRARY_PATH"
}

v_glx_vendor() {
	VKV_SET+=("__GLX_VENDOR_LIBRARY_NAME=nvidia")
	what_add "__GLX_VENDOR_LIBRARY_NAME=nvidia"
}

# vk_variant NAME: the variant's changes to the environment as it is now:
# VKV_SET (NAME=VALUE), VKV_UNSET (NAME), VKV_WHAT (what it does);
# status 1 when it does not apply here (VKV_WHAT says why).
vk_variant() {
	VKV_NAME=$1
	VKV_SET=()
	VKV_UNSET=()
	VKV_WHAT=""
	VKV_NO_VALIDATION=0
	V_LDP="${LD_LIBRARY_PATH:-}"
	case $1 in
	as-set) what_add "the environment as set" ;;
	egl) v_egl || return 1 ;;
	egl-icd)
		v_egl_icd || return 1
		v_egl >/dev/null || true
		;;
	no-layers) v_no_layers ;;
	abs-icd) v_abs_icd || return 1 ;;
	no-glvnd)
		V_LDP="$(ldp_drop "$V_LDP" "$K/vulkan/glvnd")"
		if [ "$V_LDP" = "${LD_LIBRARY_PATH:-}" ]; then
			what_add "the kit's glvnd folder is not on LD_LIBRARY_PATH"
			return 1
		fi
		what_add "the kit's glvnd folder off LD_LIBRARY_PATH"
		;;
	glvnd-first) v_glvnd_first || return 1 ;;
	system-loader)
		local sys
		sys="$(ldconfig_p | awk '$1 == "libvulkan.so.1" { print $NF; exit }')"
		if [ -z "$sys" ] || [ "$sys" = "${GPUMEM_LIBVULKAN:-}" ]; then
			what_add "ldconfig lists no libvulkan.so.1 of the machine's"
			return 1
		fi
		VKV_SET+=("GPUMEM_LIBVULKAN=$sys")
		what_add "the machine's loader $sys"
		;;
	default-search)
		VKV_UNSET+=(VK_DRIVER_FILES VK_ICD_FILENAMES)
		what_add "VK_DRIVER_FILES unset: the loader searches its default folders"
		if [ -e "$(icd_json)" ]; then
			VKV_SET+=("VK_ADD_DRIVER_FILES=$(icd_json)")
			what_add "plus VK_ADD_DRIVER_FILES=$(icd_json)"
		fi
		;;
	glx-vendor) v_glx_vendor ;;
	all | all-egl-icd)
		v_egl >/dev/null || true
		if [ "$1" = all-egl-icd ]; then
			v_egl_icd || return 1
		else
			v_abs_icd || true
		fi
		v_no_layers
		v_glvnd_first || true
		v_glx_vendor
		;;
	*)
		what_add "no such variant"
		return 1
		;;
	esac
	if [ "$V_LDP" != "${LD_LIBRARY_PATH:-}" ]; then
		VKV_SET+=("LD_LIBRARY_PATH=$V_LDP")
	fi
	return 0
}

# vk_variant_env: the variant as text (NAME=VALUE, -NAME for unset).
vk_variant_env() {
	local out="" u kv
	for u in ${VKV_UNSET[@]+"${VKV_UNSET[@]}"}; do out="${out:+$out }-$u"; done
	for kv in ${VKV_SET[@]+"${VKV_SET[@]}"}; do out="${out:+$out }$kv"; done
	echo "${out:-(no change)}"
}

# vk_probe OUT [ENV...]: gpumem info under the variant (CUDA left out, so
# that only Vulkan's time is spent and nothing else is loaded), with the
# loader's errors and warnings, into OUT.
vk_probe() {
	local out=$1 u
	shift
	local args=(-u GPUMEM_LIBCUDA)
	for u in ${VKV_UNSET[@]+"${VKV_UNSET[@]}"}; do args+=(-u "$u"); done
	with_timeout 20 env "${args[@]}" GPUMEM_LIBCUDA=/nonexistent/gpu-check-leaves-cuda-out/libcuda.so.1 \
		VK_LOADER_DEBUG=error,warn ${VKV_SET[@]+"${VKV_SET[@]}"} "$@" "$K/bin/gpumem" info >"$out" 2>&1
}

# loader_why FILE: the loader's errors and warnings (then its lines about
# drivers, ICDs, negotiation), one line, for a figure or a reason.
loader_why() {
	{
		grep -E '^(ERROR|WARNING)' "$1"
		grep -iE 'driver|ICD|negotiat|NVIDIA' "$1" | grep -vE '^(ERROR|WARNING)|In following locations|Found the following files|Searching for (driver|layer)|^[A-Z |]+: +/|^(host|sim|cuda|vulkan) '
	} | sed 's/^[A-Z][A-Z |]*: *//' | awk '!seen[$0]++' | head -n 8 | paste -sd'|' - | sed 's/|/ | /g' | cut -c1-700
}

# ld_missing FILE: from an LD_DEBUG=files log, the libraries looked for
# and never mapped (NOT FOUND), then those opened at run time.
ld_missing() {
	awk '
	match($0, /file=[^ ]+ \[[0-9]+\];  (needed by|dynamically loaded by) /) {
		s = substr($0, RSTART + 5); name = s; sub(/ \[.*/, "", name)
		by = s; sub(/.*(needed by|dynamically loaded by) /, "", by); sub(/ \[[0-9]+\]$/, "", by)
		kind = (s ~ /dynamically loaded by/) ? "dlopen" : "needed"
		if (name ~ /^\/nonexistent\//) next
		if (!(name in how)) { order[++n] = name; how[name] = kind " by " by }
		next
	}
	match($0, /file=[^ ]+ \[[0-9]+\];  generating link map/) {
		s = substr($0, RSTART + 5); name = s; sub(/ \[.*/, "", name); ok[name] = 1
	}
	END {
		for (i = 1; i <= n; i++) if (!(order[i] in ok)) printf "NOT FOUND  %s (%s)\n", order[i], how[order[i]]
		for (i = 1; i <= n; i++) if ((order[i] in ok) && how[order[i]] ~ /^dlopen/) printf "opened     %s (%s)\n", order[i], how[order[i]]
	}' "$1"
}

# vk_diagnose: why Vulkan did not come up, in the log and as figures:
# the loader's own account, the libraries not found, the NVIDIA files.
VK_LOADER_WHY=""
VK_MISSING=""
vk_diagnose() {
	local dbg="$logs/device-loader-debug.txt" ldd_log="$logs/device-ld-debug.txt" f lib p
	echo
	echo "== Vulkan: the loader's own account (VK_LOADER_DEBUG=all gpumem info, CUDA left out; first 300 lines, all in logs/device-loader-debug.txt)"
	VKV_SET=()
	VKV_UNSET=()
	vk_probe "$dbg" VK_LOADER_DEBUG=all
	head -n 300 "$dbg"
	VK_LOADER_WHY="$(loader_why "$dbg")"
	fig vulkan_loader "${VK_LOADER_WHY:-the loader printed no error}"
	echo
	echo "== Vulkan: libraries the process looked for (LD_DEBUG=files; all in logs/device-ld-debug.txt)"
	rm -f "$work/lddebug".*
	vk_probe "$work/vk-ld-probe.txt" LD_DEBUG=files LD_DEBUG_OUTPUT="$work/lddebug"
	cat "$work/lddebug".* >"$ldd_log" 2>/dev/null
	ld_missing "$ldd_log"
	VK_MISSING="$(ld_missing "$ldd_log" | sed -n 's/^NOT FOUND  \([^ ]*\) .*/\1/p' | paste -sd, -)"
	fig vulkan_libs_not_found "${VK_MISSING:-none}"
	echo
	echo "== Vulkan: the loader this process uses"
	echo "GPUMEM_LIBVULKAN=${GPUMEM_LIBVULKAN:-(unset: libvulkan.so.1 by name)}"
	[ -n "${GPUMEM_LIBVULKAN:-}" ] && ls -la "$GPUMEM_LIBVULKAN"
	grep -m1 'Vulkan Loader Version' "$dbg"
	echo "the machine's: $(ldconfig_p | awk '$1 == "libvulkan.so.1" { print $NF; exit }')"
	echo
	echo "== NVIDIA files ($nv_root)"
	echo "\$ ls -la $nv_root/lib64 | grep -iE 'vk|spirv|glx|glcore|gpucomp|egl'"
	# shellcheck disable=SC2010 # the listing itself is what the log wants
	ls -la "$nv_root/lib64" 2>&1 | grep -iE 'vk|spirv|glx|glcore|gpucomp|egl|No such'
	echo "\$ find $nv_root/share -name '*.json'"
	find "$nv_root/share" -maxdepth 4 -name '*.json' 2>&1 | head -n 20
	echo "\$ ls -la /dev/nvidia* /dev/dri"
	ls -la /dev/nvidia* /dev/dri 2>&1
	echo "\$ cat /proc/driver/nvidia/version"
	cat /proc/driver/nvidia/version 2>&1
	echo "\$ env | grep -E '^NVIDIA_'"
	env | grep -E '^NVIDIA_' || echo "(none)"
	echo "\$ env | grep -E '^(VK_|__GL|__EGL|XDG_|DISPLAY|WAYLAND_)'"
	env | grep -E '^(VK_|__GL|__EGL|XDG_|DISPLAY|WAYLAND_)' || echo "(none)"
	f="$(icd_json)"
	echo "\$ cat $f"
	cat "$f" 2>&1
	echo "\$ ldconfig -p | grep -iE 'vulkan|GLX|GLdispatch|EGL'"
	ldconfig_p | grep -iE 'vulkan|GLX|GLdispatch|EGL' || echo "(none)"
	echo "glvnd's EGL vendor files: $(existing /usr/share/glvnd/egl_vendor.d/*.json /etc/glvnd/egl_vendor.d/*.json | paste -sd' ' -)"
	local spirv=""
	[ -n "$(fig_get driver)" ] && spirv="libnvidia-glvkspirv.so.$(fig_get driver)"
	for lib in "$(icd_lib "$f")" libGLX_nvidia.so.0 libEGL_nvidia.so.0 libEGL.so.1 libGLX.so.0 libGLdispatch.so.0 $spirv; do
		[ -n "$lib" ] || continue
		p="$(resolve_lib "$lib")"
		if [ -z "$p" ]; then
			echo "$lib: not found (LD_LIBRARY_PATH, ldconfig)"
			continue
		fi
		echo "$lib: $p -> $(readlink -f "$p" 2>/dev/null)$(grep -qa vk_icdGetInstanceProcAddr "$p" 2>/dev/null && echo ' (exports vk_icdGetInstanceProcAddr)')"
	done
	p="$(resolve_lib "$(icd_lib "$f")")"
	if [ -n "$p" ] && have ldd; then
		echo "\$ ldd $p"
		ldd "$p" 2>&1 | sed 's/^/  /'
	fi
}

# vk_variants WHY0 T0: the variants after the first probe failed (WHY0),
# each a probe; the first that gives a GPU (a device, where none is
# expected) is exported for the later steps. At most 90 s of the step
# (begun at T0) go on them.
vk_variants() {
	local why0=$1 t0=$2 name out tried="" fallback="" ok=""
	mkdir -p "$work/vkv"
	# A CPU device from the first probe is the fallback, unless a variant
	# finds the GPU.
	grep -q '^vulkan *available' "$logs/device-vkv-as-set.txt" && fallback=as-set
	echo
	echo "== Vulkan: variants of the environment (first that gives $([ "$VK_EXPECT_GPU" = 1 ] && echo "a GPU" || echo "a device") kept; each probe in logs/device-vkv-NAME.txt)"
	for name in "${VK_VARIANTS[@]}"; do
		[ "$name" = as-set ] && continue # the probe above
		if awk -v a="$t0" -v b="$(now)" -v l="$((STEP_TIMEOUT - 55))" 'BEGIN { exit !(b - a > l || l < 20) }'; then
			echo "-- $name: not tried, the step's time is spent"
			tried="$tried${tried:+; }$name: not tried (time)"
			continue
		fi
		if ! vk_variant "$name"; then
			echo "-- $name: does not apply here: $VKV_WHAT"
			tried="$tried${tried:+; }$name: n/a"
			continue
		fi
		out="$logs/device-vkv-$name.txt"
		echo "-- $name: $VKV_WHAT"
		echo "   env: $(vk_variant_env)"
		vk_env_line >"$out.env"
		vk_probe "$out"
		local rc=$? res
		{
			echo "# variant $name: $VKV_WHAT"
			echo "# env: $(vk_variant_env)"
			echo "# exit status $rc"
		} >>"$out"
		rm -f "$out.env"
		if grep -q '^vulkan *available' "$out"; then
			if vk_good "$(cat "$out")"; then
				res="ok: $(vk_device_name "$(cat "$out")")"
				ok=$name
			else
				res="a CPU device only: $(vk_device_name "$(cat "$out")")"
				[ -n "$fallback" ] || fallback=$name
			fi
		else
			res="fail: $(sed -n 's/^vulkan *not available: //p' "$out" | head -n 1 | sed 's/ (is a Vulkan driver installed.*//')"
			[ $rc -eq 124 ] || [ $rc -eq 137 ] && res="fail: timed out after 20s"
		fi
		echo "   $res"
		grep -E '^(ERROR|WARNING)' "$out" | awk '!seen[$0]++' | head -n 4 | sed 's/^/   | /'
		tried="$tried${tried:+; }$name: ${res%%:*}"
		[ -n "$ok" ] && break
	done
	fig vulkan_variants_tried "$tried"
	if [ -z "$ok" ] && [ -n "$fallback" ]; then
		ok=$fallback
	fi
	if [ -z "$ok" ]; then
		fig vulkan_variant none
		VK_WHY="${why0% (is a Vulkan driver installed?*}; the loader: ${VK_LOADER_WHY:-no error printed}${VK_MISSING:+; not found: $VK_MISSING}; no variant of the environment helped (see the device step's log)"
		return
	fi
	# Kept: exported for every later step.
	vk_variant "$ok" >/dev/null
	local u kv
	for u in ${VKV_UNSET[@]+"${VKV_UNSET[@]}"}; do unset "$u"; done
	for kv in ${VKV_SET[@]+"${VKV_SET[@]}"}; do export "${kv%%=*}=${kv#*=}"; done
	if [ "$VKV_NO_VALIDATION" = 1 ]; then
		validation=""
	fi
	fig vulkan_variant "$ok$([ "$ok" = "$fallback" ] && [ "$VK_EXPECT_GPU" = 1 ] && echo " (a CPU device only)")"
	fig vulkan_variant_env "$(vk_variant_env)"
	echo
	echo "== Vulkan: variant $ok kept for the later steps"
	vk_env_line
	vk_parse "$(cat "$logs/device-vkv-$ok.txt")"
	if [ "$VK_OK" = 1 ] && [ "$ok" = "$fallback" ] && [ "$VK_EXPECT_GPU" = 1 ]; then
		fig vulkan_note "no variant found the GPU ($why0; the loader: ${VK_LOADER_WHY:-no error printed}); the Vulkan steps run on the CPU device"
	fi
}

s_device() {
	local t_step
	t_step="$(now)"
	echo "== kit"
	sed -n '1,5p' "$here/MANIFEST.txt" 2>/dev/null
	fig kit_commit "$(sed -n 's/^commit: //p' "$here/MANIFEST.txt" 2>/dev/null)"
	echo
	echo "== machine"
	uname -a
	(ldd --version 2>/dev/null || true) | head -n 1
	fig quick "$quick"
	fig cores "$(nproc 2>/dev/null || echo 0)"
	echo
	echo "== driver and device (nvidia-smi)"
	local smi_rc=1
	if have nvidia-smi; then
		local q
		q="$(with_timeout 20 nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1)"
		smi_rc=$?
		echo "$q"
		GPU_NAME="$(echo "$q" | head -n 1 | cut -d, -f2 | sed 's/^ *//')"
		fig gpu "$GPU_NAME"
		fig driver "$(echo "$q" | head -n 1 | cut -d, -f3 | sed 's/^ *//')"
		fig gpu_memory "$(echo "$q" | head -n 1 | cut -d, -f4 | sed 's/^ *//')"
	else
		echo "nvidia-smi not found"
		fig gpu none
	fi
	# Is a Vulkan GPU expected? Then a CPU device (lavapipe) alone is not
	# the answer, and the variants are tried.
	VK_EXPECT_GPU=0
	if [ -n "${GPU_CHECK_EXPECT_GPU:-}" ]; then
		[ "$GPU_CHECK_EXPECT_GPU" = 1 ] && VK_EXPECT_GPU=1
	elif [ "$smi_rc" = 0 ] && [ -n "$GPU_NAME" ]; then
		VK_EXPECT_GPU=1
	fi
	echo
	echo "== backends (bin/gpumem info)"
	vk_env_line
	echo "validation layer: ${validation:-none}"
	local info rc
	info="$(with_timeout 60 "$K/bin/gpumem" info 2>&1)"
	rc=$?
	echo "$info"
	if [ $rc -ne 0 ] && ! grep -q '^cuda' <<<"$info"; then
		fail "the kit's gpumem does not run here (exit $rc): $(echo "$info" | tail -n 1)"
		return
	fi
	if grep -q '^cuda *available' <<<"$info"; then
		CUDA_OK=1
		CUDA_WHY=""
	else
		CUDA_WHY="$(echo "$info" | sed -n 's/^cuda *not available: //p' | head -n 1)"
		[ -n "$CUDA_WHY" ] || CUDA_WHY="gpumem info names no CUDA backend"
	fi
	vk_parse "$info"
	if vk_good "$info"; then
		fig vulkan_variant as-set
	else
		# The loader's own account, what the process could not open, the
		# NVIDIA files; then the variants, first that works kept.
		local why0=$VK_WHY
		[ "$VK_OK" = 1 ] && why0="only a CPU device ($(vk_device_name "$info")) beside ${GPU_NAME:-the GPU}"
		printf '%s\n' "$info" >"$logs/device-vkv-as-set.txt"
		vk_diagnose
		vk_variants "$why0" "$t_step"
	fi
	if [ "$VK_OK" = 1 ] && [ -n "$validation" ]; then
		# Does the validation layer load here? If not, the Vulkan steps run
		# without it rather than fail for it.
		echo
		echo "== the validation layer ($validation)"
		local vp
		vp="$(cd "$K/tree/vulkan" && CI=true with_timeout 60 "$K/test/vulkan.test" -test.count=1 -test.v -test.run '^TestValidationMessagesReachTheBackend$' 2>&1)"
		echo "$vp" | tail -n 5
		if grep -q '^--- PASS: TestValidationMessagesReachTheBackend' <<<"$vp"; then
			fig validation "$validation"
		else
			fig validation "off: the layer does not work here ($(grep -v '^\s*$' <<<"$vp" | grep -v '^=== RUN' | head -n 2 | paste -sd' ' - | cut -c1-200))"
			validation=""
		fi
	fi
	fig cuda "$([ $CUDA_OK = 1 ] && echo available || echo "not available: $CUDA_WHY")"
	fig vulkan "$([ $VK_OK = 1 ] && echo available || echo "not available: $VK_WHY")"
	fig vulkan_is_gpu "$VK_GPU"
	echo
	echo "== python3 and torch"
	if ! selected torch-check; then
		echo "torch-check is not selected: not probed"
		fig torch "not probed (torch-check not selected)"
	elif have python3; then
		local py
		py="$(with_timeout 45 python3 -c 'import sys
print("python", sys.version.split()[0])
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.cuda.is_available())
except Exception as e:
    print("torch not importable:", e)' 2>&1)"
		echo "$py"
		fig python "$(echo "$py" | sed -n 's/^python //p')"
		fig torch "$(echo "$py" | sed -n 's/^torch //p; s/^torch not importable: .*/none/p')"
		if grep -q '^torch .* cuda True' <<<"$py"; then
			TORCH_OK=1
		fi
	else
		echo "no python3"
		fig python none
	fi
	pass
}

need_vk() {
	if [ "$VK_OK" != 1 ]; then
		skip "no Vulkan device: $VK_WHY"
		return 1
	fi
}
need_cuda() {
	if [ "$CUDA_OK" != 1 ]; then
		skip "no CUDA driver: $CUDA_WHY"
		return 1
	fi
}

# vk_env: the environment of the validated vulkan test runs.
vk_validated() { [ -n "$validation" ]; }

vk_bench() { # vk_bench FULL_ARGS... -- QUICK_ARGS...
	local full=() q=() rc
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		full+=("$1")
		shift
	done
	shift
	q=("$@")
	if [ "$quick" = 1 ]; then
		run_in "$K/tree/vulkan" "$STEP_TIMEOUT" "$K/test/vulkan.test" -test.run '^$' -test.v "${q[@]}"
	else
		run_in "$K/tree/vulkan" "$STEP_TIMEOUT" "$K/test/vulkan.test" -test.run '^$' -test.v "${full[@]}"
	fi
	rc=$?
	bench_figures $rc "$LOG"
}

s_vk_allocfree() {
	need_vk || return
	vk_bench -test.bench '^BenchmarkAllocFree$' -test.benchtime 1s -- -test.bench '^BenchmarkAllocFree$' -test.benchtime 20000x
	local sz x
	for sz in 4KiB 1MiB 64MiB; do
		x="$(fig_get "AllocFree/$sz:x-floor")"
		echo "AllocFree/$sz: gpumem $(fig_get "AllocFree/$sz:ns/op") ns/op, raw vkAllocateMemory+vkFreeMemory $(fig_get "AllocFree/$sz:raw-ns/op") ns/op, ratio $x"
	done
	if [ "$VK_GPU" = 1 ] && [ "$STATUS" = pass ]; then
		for sz in 4KiB 1MiB; do
			x="$(fig_get "AllocFree/$sz:x-floor")"
			if le "$x" 0.1; then
				target "alloc-free-$sz" 1
			else
				target "alloc-free-$sz" 0 "Alloc+Free at $sz is $x of vkAllocateMemory+vkFreeMemory, target <= 0.1"
			fi
		done
	fi
}

s_vk_queues() {
	need_vk || return
	local rc line
	if vk_validated; then
		CI=true run_in "$K/tree/vulkan" "$STEP_TIMEOUT" "$K/test/vulkan.test" -test.count=1 -test.v -test.run '^TestStreamsOnDistinctQueuesOrderCrossStreamUsesBySemaphores$'
	else
		run_in "$K/tree/vulkan" "$STEP_TIMEOUT" "$K/test/vulkan.test" -test.count=1 -test.v -test.run '^TestStreamsOnDistinctQueuesOrderCrossStreamUsesBySemaphores$'
	fi
	rc=$?
	fig validated "$(vk_validated && echo "$validation" || echo no)"
	line="$(grep -o 'compute family of [0-9]* queue(s); streams on distinct VkQueues: [a-z]*' "$LOG" | head -n 1)"
	if [ -n "$line" ]; then
		fig compute_queues "$(echo "$line" | awk '{ print $4 }')"
		fig distinct_queues "$(echo "$line" | awk '{ print $NF }')"
	fi
	test_outcome $rc "$LOG"
}

# oom BACKEND: bin/oomcheck's figures and outcome.
oom() {
	local rc
	run_in "$K" "$STEP_TIMEOUT" "$K/bin/oomcheck" -backend "$1"
	rc=$?
	sed -n 's/^figure: \([^ ]*\) \(.*\)$/\1\t\2/p' "$LOG" >>"$FIGS"
	case $rc in
	0) pass ;;
	2) skip "$(sed -n 's/^result: skip: //p' "$LOG" | head -n 1)" ;;
	124 | 137) fail "timed out after ${STEP_TIMEOUT}s" ;;
	*) fail "$(sed -n 's/^result: fail: //p' "$LOG" | head -n 1 | cut -c1-300)${rc:+ (exit $rc)}" ;;
	esac
}
s_vk_oom() {
	need_vk || return
	oom vulkan
}

s_vk_tests() {
	need_vk || return
	local args=(-test.count=1 -test.v) skips=() rc
	[ "$quick" = 1 ] && args+=(-test.short)
	if vk_validated; then
		# CI=true: a missing device fails and validation is on. Tests that
		# need a development tool absent here are left out, said so.
		if ! have glslc; then
			skips+=("TestCommittedSPIRVMatchesAFreshCompile" "TestPushConstantBlockSizeIsReadFromTheModule")
		fi
		if [ ${#skips[@]} -gt 0 ]; then
			local pat
			pat="^($(
				IFS='|'
				echo "${skips[*]}"
			))\$"
			args+=(-test.skip "$pat")
			fig left_out "${skips[*]} (glslc missing here)"
		fi
		fig validated "$validation"
		CI=true run_in "$K/tree/vulkan" "$STEP_TIMEOUT" "$K/test/vulkan.test" "${args[@]}"
		rc=$?
		test_outcome $rc "$LOG"
		if [ "$STATUS" = fail ] && [ "$(left)" -gt 60 ]; then
			# Validation's own trouble, or the backend's? Once more, without.
			echo
			echo "== again without the validation layer (CI unset)"
			local before=$STATUS why=$REASON
			cp "$LOG" "$LOG.validated"
			: >"$FIGS.u"
			local again=(-test.count=1 -test.v)
			[ "$quick" = 1 ] && again+=(-test.short)
			run_in "$K/tree/vulkan" "$(($(left) - 30))" "$K/test/vulkan.test" "${again[@]}" >"$LOG.unvalidated" 2>&1
			rc=$?
			cat "$LOG.unvalidated"
			local p f
			p=$(grep -c '^--- PASS: ' "$LOG.unvalidated")
			f=$(grep -c '^--- FAIL: ' "$LOG.unvalidated")
			fig unvalidated_passed "$p"
			fig unvalidated_failed "$f"
			fig unvalidated_exit "$rc"
			STATUS=$before
			REASON="$why; without validation: exit $rc, $p passed, $f failed"
		fi
	else
		fig validated no
		run_in "$K/tree/vulkan" "$STEP_TIMEOUT" "$K/test/vulkan.test" "${args[@]}"
		rc=$?
		test_outcome $rc "$LOG"
	fi
}

s_cuda_tests() {
	local rc args=(-test.count=1 -test.v)
	if [ "$CUDA_OK" = 1 ]; then
		[ "$quick" = 1 ] && args+=(-test.short)
		GPUMEM_REQUIRE_CUDA=1 run_in "$K/tree/cuda" "$STEP_TIMEOUT" "$K/test/cuda.test" "${args[@]}"
		rc=$?
		fig real_passed "$(grep -c '^ *--- PASS: .*\(/real \|TestRealDriver\)' "$LOG")"
		fig real_failed "$(grep -c '^ *--- FAIL: .*\(/real \|TestRealDriver\)' "$LOG")"
		fig real_skipped "$(grep -c '^ *--- SKIP: .*\(/real \|TestRealDriver\)' "$LOG")"
		test_outcome $rc "$LOG"
		return
	fi
	# No driver: the binary still runs a few tests (its test data, the
	# fake driver's source where gcc builds it, the scripts it parses), so
	# a broken kit shows before the GPU day.
	run_in "$K/tree/cuda" "$STEP_TIMEOUT" "$K/test/cuda.test" "${args[@]}" -test.short \
		-test.run '^(TestRealDriverCopiesKernelsAndGraphs|TestDriverOutOfMemoryIsErrOutOfMemoryAfterTheRetry|TestUserKernelIsInStreamOrderWithAnotherStreamsOp|TestGPUCheckScriptParses|TestLoadFailureAlwaysHasAReason)$'
	rc=$?
	test_outcome $rc "$LOG"
	if [ "$STATUS" != fail ]; then
		STATUS=""
		skip "no CUDA driver: $CUDA_WHY (the kit's own check: $(fig_get tests_passed) fake-driver and load tests passed, $(fig_get tests_skipped) skipped)"
	fi
}

cuda_bench() { # cuda_bench FULL_ARGS... -- QUICK_ARGS...
	need_cuda || return 1
	local full=() q=() rc
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		full+=("$1")
		shift
	done
	shift
	q=("$@")
	if [ "$quick" = 1 ]; then
		GPUMEM_REQUIRE_CUDA=1 run_in "$K/tree/cuda" "$STEP_TIMEOUT" "$K/test/cuda.test" -test.run '^$' -test.v "${q[@]}"
	else
		GPUMEM_REQUIRE_CUDA=1 run_in "$K/tree/cuda" "$STEP_TIMEOUT" "$K/test/cuda.test" -test.run '^$' -test.v "${full[@]}"
	fi
	rc=$?
	bench_figures $rc "$LOG"
}

s_cuda_allocfree() {
	cuda_bench -test.bench '^BenchmarkAllocFree$' -test.benchtime 1s -- -test.bench '^BenchmarkAllocFree$' -test.benchtime 20000x || return
	local sz
	for sz in 4KiB 1024KiB 65536KiB; do
		echo "AllocFree/$sz: gpumem $(fig_get "AllocFree/$sz:ns/op") ns/op, raw cuMemAlloc+cuMemFree $(fig_get "AllocFree/$sz:raw-ns/op") ns/op, ratio $(fig_get "AllocFree/$sz:x-floor")"
	done
}

# last_size PREFIX: the last sub-benchmark of PREFIX with an x-floor
# figure (the largest size that ran).
last_size() { awk -F'\t' -v p="$1" 'index($1, p) == 1 && $1 ~ /:x-floor$/ { n = $1 } END { sub(/:x-floor$/, "", n); print n }' "$FIGS"; }

s_cuda_relocation() {
	cuda_bench -test.bench '^BenchmarkRelocationThroughput$' -test.benchtime 3x -- -test.bench '^BenchmarkRelocationThroughput$' -test.benchtime 1x || return
	[ "$STATUS" = pass ] || return
	local last x bps
	last="$(last_size RelocationThroughput/)"
	x="$(fig_get "$last:x-floor")"
	bps="$(fig_get "$last:B/s")"
	echo "$last: relocation $bps B/s, cuMemcpyDtoD $(fig_get "$last:floor-B/s") B/s, ratio $x; against copy+free $(fig_get "$last:x-copy-free-floor"); without the release $(fig_get "$last:x-floor-less-release")"
	echo "$last per Cleanup: $(fig_get "$last:cleanup-ns/op") ns = sync $(fig_get "$last:sync-ns/op") + copy $(fig_get "$last:copy-ns/op") + release $(fig_get "$last:release-ns/op") + rest $(fig_get "$last:rest-ns/op"); floors: copy $(fig_get "$last:floor-copy-ns/op"), free $(fig_get "$last:floor-free-ns/op")"
	fig largest "$last"
	# Judged as the issue set it: Cleanup (copy and giving the page back)
	# against the raw copy alone. The phases above say where a miss lies.
	if ge "$x" 0.8; then
		target relocation-x-floor 1
	else
		target relocation-x-floor 0 "$last relocates at $x of cuMemcpyDtoD, target >= 0.8 (copy+free floor: $(fig_get "$last:x-copy-free-floor"))"
	fi
	if [[ "$GPU_NAME" == *H200* ]]; then
		if ge "$bps" 1.5e12; then
			target relocation-h200 1
		else
			target relocation-h200 0 "$last relocates $bps B/s on an H200, target >= 1.5e12"
		fi
	fi
}

s_cuda_transfers() {
	cuda_bench -test.bench '^BenchmarkTransfers$' -test.benchtime 3x -- -test.bench '^BenchmarkTransfers$' -test.benchtime 1x || return
	local k
	awk -F'\t' '$1 ~ /^Transfers\/.*:write-x-floor$/ { sub(/:.*/, "", $1); print $1 }' "$FIGS" | while IFS= read -r k; do
		echo "$k: Write $(fig_get "$k:write-B/s") B/s ($(fig_get "$k:write-x-floor") of cuMemcpyHtoD), Read $(fig_get "$k:read-B/s") B/s ($(fig_get "$k:read-x-floor") of cuMemcpyDtoH)"
	done
}

s_cuda_graph() {
	cuda_bench -test.bench '^Benchmark(GraphLaunch|GraphReplayAfterRelocation)$' -test.benchtime 20x -- -test.bench '^Benchmark(GraphLaunch|GraphReplayAfterRelocation)$' -test.benchtime 2x || return
	[ "$STATUS" = pass ] || return
	local x
	x="$(fig_get "GraphLaunch:x-floor")"
	echo "GraphLaunch: graph $(fig_get "GraphLaunch:ns/op") ns/op, the same 16 ops launched directly $(fig_get "GraphLaunch:direct-ns/op") ns/op, ratio $x"
	if le "$x" 1; then
		target graph-launch 1
	else
		target graph-launch 0 "a graph launch costs $x of the direct launches, target <= 1"
	fi
}

s_cuda_oom() {
	need_cuda || return
	oom cuda
}

# example CHECKED BIN ARGS...: an example's run; with CHECKED=1 it must
# print its check line ending in ": ok" (examples/basic checks every byte
# itself and exits non-zero otherwise).
example() {
	local checked=$1 rc check
	shift
	run_in "$K" "$STEP_TIMEOUT" "$@"
	rc=$?
	check="$(grep '^example check:' "$LOG" | tail -n 1)"
	[ -n "$check" ] && fig check "${check#example check: }"
	if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
		fail "timed out after ${STEP_TIMEOUT}s"
	elif [ $rc -ne 0 ]; then
		fail "exit status $rc: $(tail -n 1 "$LOG" | cut -c1-200)"
	elif [ "$checked" = 1 ] && [[ "$check" != *": ok" ]]; then
		fail "no passing check line (example check: ... ok)"
	else
		pass
	fi
}
launches() { if [ "$quick" = 1 ]; then echo 20; else echo 200; fi; }
s_ex_cuda() {
	need_cuda || return
	example 1 "$K/bin/example-cuda" -launches "$(launches)"
}
s_ex_vulkan() {
	need_vk || return
	example 1 "$K/bin/example-vulkan" -launches "$(launches)"
}
s_ex_basic() { example 0 "$K/bin/example-basic"; }

s_vk_relocation() {
	need_vk || return
	vk_bench -test.bench '^BenchmarkRelocationThroughput$' -test.benchtime 2x -- -test.bench '^BenchmarkRelocationThroughput$/^16MiB$' -test.benchtime 1x
	[ "$STATUS" = pass ] || return
	local last x
	last="$(last_size RelocationThroughput/)"
	x="$(fig_get "$last:x-floor")"
	echo "$last: relocation $(fig_get "$last:B/s") B/s, fresh vkCmdCopyBuffer $(fig_get "$last:floor-B/s") B/s, ratio $x (hot copy: $(fig_get "$last:x-hot-floor"))"
	fig largest "$last"
	if [ "$VK_GPU" = 1 ]; then
		if ge "$x" 0.8; then
			target relocation-x-floor 1
		else
			target relocation-x-floor 0 "$last relocates at $x of vkCmdCopyBuffer, target >= 0.8"
		fi
	fi
}

s_vk_transfers() {
	need_vk || return
	vk_bench -test.bench '^BenchmarkTransfers$' -test.benchtime 3x -- -test.bench '^BenchmarkTransfers$/^1MiB$' -test.benchtime 1x
	local k
	awk -F'\t' '$1 ~ /^Transfers\/.*:write-x-floor$/ { sub(/:.*/, "", $1); print $1 }' "$FIGS" | while IFS= read -r k; do
		echo "$k: Write $(fig_get "$k:write-B/s") B/s ($(fig_get "$k:write-x-floor") of the raw transfer), Read $(fig_get "$k:read-B/s") B/s ($(fig_get "$k:read-x-floor"))"
	done
}

s_vk_graph() {
	need_vk || return
	vk_bench -test.bench '^BenchmarkGraphLaunch$' -test.benchtime 50x -- -test.bench '^BenchmarkGraphLaunch$' -test.benchtime 5x
}

s_vk_staging() {
	need_vk || return
	vk_bench -test.bench '^BenchmarkStagingTransfers$' -test.benchtime 2x -- -test.bench '^BenchmarkStagingTransfers$' -test.benchtime 1x
}

s_shadow() {
	need_vk || return
	local rc args=(-test.count=1 -test.v -test.run '^TestShadowModelOnVulkan$')
	[ "$quick" = 1 ] && args+=(-test.short)
	if vk_validated; then
		CI=true run_in "$K/tree" "$STEP_TIMEOUT" "$K/test/gpumem.test" "${args[@]}"
	else
		run_in "$K/tree" "$STEP_TIMEOUT" "$K/test/gpumem.test" "${args[@]}"
	fi
	rc=$?
	fig validated "$(vk_validated && echo "$validation" || echo no)"
	local total
	total="$(grep -o 'total: .*' "$LOG" | tail -n 1)"
	[ -n "$total" ] && fig total "${total#total: }"
	fig violations "$(echo "$total" | sed -n 's/.* \([0-9]*\) violations.*/\1/p')"
	test_outcome $rc "$LOG"
}

s_torch() {
	if ! have python3; then
		skip "no python3 here"
		return
	fi
	if [ "$TORCH_OK" != 1 ]; then
		skip "python3 has no torch with a CUDA device here ($(fig_get_from device torch || true))"
		return
	fi
	local rc budget_t=$((STEP_TIMEOUT - 15)) args=()
	[ "$quick" = 1 ] && args+=(--quick)
	mkdir -p "$work/torch"
	PYTHONUNBUFFERED=1 run_in "$K" "$STEP_TIMEOUT" python3 "$here/torch-check.py" --gpumem "$K/bin/gpumem" \
		--out "$work/torch" --budget "$budget_t" "${args[@]}"
	rc=$?
	sed -n 's/^figure: \([^ ]*\) \(.*\)$/\1\t\2/p' "$LOG" >>"$FIGS"
	case $rc in
	0) pass ;;
	2) skip "$(sed -n 's/^result: skip: //p' "$LOG" | head -n 1)" ;;
	124 | 137) fail "timed out after ${STEP_TIMEOUT}s" ;;
	*) fail "$(sed -n 's/^result: fail: //p' "$LOG" | head -n 1 | cut -c1-300) (exit $rc)" ;;
	esac
}
fig_get_from() { awk -F'\t' -v k="$2" '$1 == k { v = $2 } END { print v }' "$work/figs/$1.tsv" 2>/dev/null; }

# ---------------------------------------------------------------- run

echo "gpu-check: kit $here ($(sed -n 's/^commit: //p' "$here/MANIFEST.txt" 2>/dev/null)), $([ "$quick" = 1 ] && echo quick || echo full), budget ${budget}s, results in $results${selection:+, steps: $selection (device always)}"
# not_run NAME WHY: the step recorded as skipped without running.
not_run() {
	FIGS="$work/figs/$1.tsv"
	: >"$FIGS"
	printf '{"name": %s, "status": "skip", "reason": %s, "seconds": 0, "timeout": 0, "figures": {}, "log": ""}\n' "$(json_str "$1")" "$(json_str "$2")" >>"$work/steps.jsonl"
	printf '%-24s %-4s %6ss  %s\n' "$1" skip 0.0 "$2"
}
for s in "${STEPS[@]}"; do
	IFS='|' read -r name full q fn what <<<"$s"
	limit=$full
	[ "$quick" = 1 ] && limit=$q
	if ! selected "$name"; then
		not_run "$name" "not selected ($selection)"
		continue
	fi
	if [ "$quick" = 1 ] && [ "$q" = 0 ]; then
		not_run "$name" "not in the quick form"
		continue
	fi
	run_step "$name" "$limit" "$fn"
done

# ---------------------------------------------------------------- results

total_secs="$(elapsed "$t_start")"
npass=$(grep -c '"status": "pass"' "$work/steps.jsonl")
nfail=$(grep -c '"status": "fail"' "$work/steps.jsonl")
nskip=$(grep -c '"status": "skip"' "$work/steps.jsonl")
# Steps a selection left out count apart from the skipped ones.
nnotsel=$(grep -c '"reason": "not selected' "$work/steps.jsonl")
nskip=$((nskip - nnotsel))
{
	printf '{\n "kit": %s,\n "machine": %s,\n "quick": %s,\n "budget_seconds": %s,\n "seconds": %s,\n' \
		"$(json_str "$(sed -n 's/^commit: //p' "$here/MANIFEST.txt" 2>/dev/null)")" \
		"$(json_str "$(uname -nrm)")" "$([ "$quick" = 1 ] && echo true || echo false)" "$budget" "$total_secs"
	printf ' "selection": %s,\n' "$(json_str "$selection")"
	printf ' "summary": {"pass": %d, "fail": %d, "skip": %d, "not_selected": %d},\n "steps": [\n' "$npass" "$nfail" "$nskip" "$nnotsel"
	sed '$!s/$/,/; s/^/  /' "$work/steps.jsonl"
	printf ' ]\n}\n'
} >"$results/results.json"

{
	echo "gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n): $([ "$quick" = 1 ] && echo quick || echo full) run, ${total_secs}s"
	echo "kit: $(sed -n 's/^commit: //p' "$here/MANIFEST.txt" 2>/dev/null)"
	echo "device: $(fig_get_from device gpu)$(d="$(fig_get_from device driver)"; [ -n "$d" ] && echo " (driver $d)"); vulkan: $(v="$(fig_get_from device vulkan_device)"; echo "${v:-none}")$(v="$(fig_get_from device vulkan_variant)"; [ -n "$v" ] && [ "$v" != as-set ] && echo " (environment variant: $v)")"
	v="$(fig_get_from device vulkan_loader)"
	[ -z "$v" ] || echo "vulkan loader said: $v"
	echo "steps: $npass passed, $nfail failed, $nskip skipped${selection:+, $nnotsel not selected ($selection)}"
	echo
	for s in "${STEPS[@]}"; do
		IFS='|' read -r name _ <<<"$s"
		line="$(grep -F "\"name\": \"$name\"" "$work/steps.jsonl" | head -n 1)"
		st="$(echo "$line" | sed -n 's/.*"status": "\([a-z]*\)".*/\1/p')"
		secs="$(echo "$line" | sed -n 's/.*"seconds": \([0-9.]*\).*/\1/p')"
		why="$(echo "$line" | sed -n 's/.*"reason": "\(\([^"\\]\|\\.\)*\)".*/\1/p')"
		printf '%-24s %-4s %6ss  %s\n' "$name" "$st" "$secs" "$why"
		if [ -s "$work/figs/$name.tsv" ] && [ "$name" != torch-check ]; then
			awk -F'\t' '{ printf "    %s = %s\n", $1, $2 }' "$work/figs/$name.tsv"
		fi
	done
	if [ -s "$work/torch/torch-check.txt" ]; then
		echo
		echo "torch-check (PyTorch on the card against gpumem advise):"
		cat "$work/torch/torch-check.txt"
	fi
} >"$results/summary.txt"

# Logs, torch-check's output; the snapshots too while the archive stays
# small enough to come back from a device run.
if [ -d "$work/torch" ]; then
	mkdir -p "$logs/torch"
	find "$work/torch" -maxdepth 1 -type f -exec cp {} "$logs/torch/" \;
fi
tar -C "$work" -czf "$results/logs.tar.gz" logs 2>/dev/null
if [ -d "$work/torch/snapshots" ]; then
	tar -C "$work/torch" -czf "$work/snapshots.tar.gz" snapshots 2>/dev/null
	if [ "$(wc -c <"$work/snapshots.tar.gz")" -lt $((15 * 1024 * 1024)) ]; then
		cp "$work/snapshots.tar.gz" "$results/snapshots.tar.gz"
	fi
fi

echo
echo "gpu-check: $npass passed, $nfail failed, $nskip skipped${selection:+, $nnotsel not selected} in ${total_secs}s; $results/results.json, summary.txt, logs.tar.gz"
[ "$nfail" -eq 0 ]
