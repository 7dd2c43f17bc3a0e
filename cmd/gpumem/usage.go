package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Each command's usage: what it does and its arguments; the flags follow,
// printed by the flag package.
const (
	replayUsage = `usage: gpumem replay [flags] [FILE]

Replays an allocation trace under gpumem's policies and a model of
PyTorch's caching allocator, side by side: each policy's peak reserved
bytes at unlimited capacity, the smallest capacity it runs in, what
relocation cost, and, with -capacity, whether it fits.

FILE is a PyTorch memory snapshot (.pickle or .json, gzip ok; every shape
memory_viz reads, PyTorch 2.0's and torch.cuda.memory_snapshot()'s list
included) or a gpumem trace (.jsonl); - reads standard input; without FILE
the embedded default trace is replayed. A snapshot with data for several
devices is replayed device by device, one report each (-device N for one).
Sizes take decimal (GB = 10⁹ B) or binary (GiB = 2³⁰ B) units, any case.

-capacity counts only what the allocator reserves: -overhead SIZE sets
aside the CUDA context and memory outside the allocator. PyTorch's model
runs with -torch-conf's settings, else those the snapshot recorded, else
PYTORCH_CUDA_ALLOC_CONF's from the environment, else its defaults.

Exit status: 0 done; 1 an error, or -fail-on-oom with a failed allocation
(at unlimited capacity or at -capacity); 2 a usage error; 3
-require-fit's policy does not fit -capacity.`

	convertUsage = `usage: gpumem convert [flags] SNAPSHOT -o TRACE.jsonl

Converts a PyTorch memory snapshot (.pickle or .json, gzip ok; - reads
standard input) to gpumem's JSONL trace: allocations live before the
snapshot's window are rebuilt first (unless -no-prelude), then every trace
entry in order, the cache releases the program made (empty_cache) as
cleanup ops. One device is converted: the snapshot's one device with
data, or -device N's.`

	synthUsage = `usage: gpumem synth -workload NAME [-seed N] [flags] -o TRACE.jsonl

Writes a synthetic workload as a gpumem JSONL trace; the same seed gives
the same bytes.`

	adviseUsage = `usage: gpumem advise [flags] SNAPSHOT

Replays a trace (a PyTorch snapshot or a gpumem .jsonl trace; - reads
standard input; each device with data of a snapshot, one report each)
through the model of PyTorch's caching allocator under a grid of settings (the
defaults, expandable segments, max_split_size_mb 64–512,
roundup_power2_divisions 4 and 8, garbage_collection_threshold 0.6 and
0.8, and the combinations that matter) beside gpumem's adaptive policy:
each setting's peak reserved and smallest capacity, the one that needs the
smallest device marked, and one recommendation: a setting only when it
needs at least max(1 GiB, 1% of the device) less than the settings the
workload runs with now (-torch-conf's, else those the snapshot recorded,
else PYTORCH_CUDA_ALLOC_CONF's from the environment, else PyTorch's
defaults). With -capacity it answers in order: can any setting fit (not
when the live tensors alone pass the capacity: then it says how much
live memory must go); do the settings in use fit, with what margin (the
capacity less their smallest device; tight under the worth-a-change
threshold) and headroom at their peak; and is a setting worth a change —
only when they do not fit, or when it gains at least max(1 GiB, 1% of the
capacity) of margin; otherwise they already fit. -capacity counts only
what the allocator reserves: -overhead SIZE sets aside the CUDA context
and memory outside the allocator. Each setting's slow path at the
capacity (retries, cudaMalloc and cudaFree calls) is shown beside it.
-require-fit exits 3 when no setting fits. Settings run in parallel.`

	versionUsage = `usage: gpumem version

Prints the version, commit and Go toolchain this binary was built from.`

	infoUsage = `usage: gpumem info

Lists the backends gpumem can run on here (host, sim and, when a CUDA
driver loads, cuda) with their alignment, page size and capacity, and the
Vulkan devices the loader enumerates (heaps, memory types, limits,
VK_EXT_memory_budget) with the vulkan backend's properties.`
)

// setUsage makes fs print text, then its flags.
func setUsage(fs *flag.FlagSet, text string) {
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintln(out, text)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(out, "\nflags:")
			fs.PrintDefaults()
		}
	}
}

// helpCmd prints one command's usage and flags to stdout (gpumem help
// COMMAND), or the overview: the command itself prints them for -h, with
// its flag output sent to stdout.
func helpCmd(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stdout, usageText)
		return nil
	}
	switch args[0] {
	case "replay", "advise", "diff", "convert", "synth", "info", "version":
		return run(ctx, []string{args[0], "-h"}, stdout, stdout)
	}
	return fmt.Errorf("%w: no command %q; the commands are replay, advise, diff, convert, synth, info and version", errUsage, args[0])
}

// messages is where a command's closing message goes: stdout, unless the
// command's output went there (-o -).
func messages(out string, stdout, stderr io.Writer) io.Writer {
	if out == "-" {
		return stderr
	}
	return stdout
}

// outName names an -o argument in a message.
func outName(out string) string {
	if out == "-" {
		return "standard output"
	}
	return strings.TrimSpace(out)
}
