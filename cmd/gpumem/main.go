// Command gpumem replays allocation traces (PyTorch memory snapshots
// included) under gpumem's policies and a model of PyTorch's caching
// allocator, side by side; converts snapshots to native traces; generates
// synthetic workloads; and lists backends.
//
//	gpumem replay [flags] [FILE]     compare policies on a trace (default: the embedded one)
//	gpumem advise SNAPSHOT [-capacity SIZE]
//	gpumem diff A [B]                why run B needs more memory than run A
//	gpumem convert SNAPSHOT -o TRACE.jsonl
//	gpumem synth -workload NAME -seed N -o TRACE.jsonl
//	gpumem info
//	gpumem version
//
// replay -backend chooses where gpumem's policies run: sim (accounting
// only, the default), host (real bytes), cuda (device memory through the
// CUDA driver, loaded at run time: libcuda.so.1 or $GPUMEM_LIBCUDA) or
// vulkan (device memory through the Vulkan loader: libvulkan.so.1 or
// $GPUMEM_LIBVULKAN; $GPUMEM_VULKAN_DEVICE picks the device).
//
// Exit status: 0 success; 1 a replay error (no CUDA driver for -backend
// cuda, or no Vulkan device for -backend vulkan, included), or failed allocations under -fail-on-oom; 2 a usage error
// (only errors wrapping errUsage; see exitCode); 3 -require-fit's policy
// does not fit -capacity. main recovers nothing: a
// Go panic is a bug, and the runtime reports it with its stack.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
)

// errUsage marks a usage error (exit status 2).
var errUsage = errors.New("usage")

// errNoFit marks -require-fit's policy not fitting -capacity (exit
// status 3), so a script can tell it from an error.
var errNoFit = errors.New("does not fit")

func main() {
	// A panic is a bug in gpumem, not a usage error: report it with its
	// stack and exit 1 (Go's own exit status for a panic, 2, would read as a
	// usage error).
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "gpumem: internal error (please report it): %v\n%s", r, debug.Stack())
			os.Exit(1)
		}
	}()
	// A replay is a batch job whose live heap is the trace (a few MiB)
	// while each of its hundreds of replays makes short-lived garbage: at
	// Go's default a collection runs every few replays and its write
	// barriers slow the models' slice updates (gpumem advise on the
	// full-step snapshot: 13 s of CPU at GOGC=100, 7 s at 400, for 6 MiB
	// more heap). GOGC, when set, wins.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpumem:", err)
	}
	if code := exitCode(err); code != 0 {
		stop()
		os.Exit(code)
	}
}

// exitCode is the exit status for run's error: 0 none, 2 an error wrapping
// errUsage, 3 one wrapping errNoFit, 1 any other.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, errNoFit):
		return 3
	default:
		return 1
	}
}

const usageText = `usage:
  gpumem replay [flags] [FILE]      replay a trace under every policy, side by side
                                    (FILE: .pickle/.json snapshot or .jsonl trace, - for standard
                                    input; default: embedded)
  gpumem advise SNAPSHOT [-capacity SIZE]
                                    which PyTorch allocator settings the workload needs
  gpumem diff A [B]                 why run B needs more memory than run A (or two -torch-conf settings)
  gpumem convert SNAPSHOT -o TRACE.jsonl
  gpumem synth -workload NAME [-seed N] -o TRACE.jsonl
  gpumem info                       available backends and their properties
  gpumem version                    the version, commit and Go toolchain of this binary
run "gpumem help COMMAND" (or "gpumem COMMAND -h") for a command's flags`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: no command\n%s", errUsage, usageText)
	}
	switch args[0] {
	case "replay":
		return replayCmd(ctx, args[1:], stdout, stderr)
	case "advise":
		return adviseCmd(ctx, args[1:], stdout, stderr)
	case "diff":
		return diffCmd(ctx, args[1:], stdout, stderr)
	case "convert":
		return convertCmd(args[1:], stdout, stderr)
	case "synth":
		return synthCmd(args[1:], stdout, stderr)
	case "info":
		return infoCmd(args[1:], stdout, stderr)
	case "help":
		return helpCmd(ctx, args[1:], stdout)
	case "version", "-version", "--version":
		return versionCmd(args[1:], stdout)
	case "-h", "-help", "--help":
		fmt.Fprintln(stdout, usageText)
		return nil
	}
	return fmt.Errorf("%w: unknown command %q\n%s", errUsage, args[0], usageText)
}
