package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/cuda"
	"github.com/gpumem/gpumem/internal/analysis/compare"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/internal/units"
)

// newFlagSet returns a command's flag set; -h prints its usage to out
// (standard output, as gpumem help COMMAND does: help asked for is output,
// not a diagnostic).
func newFlagSet(name string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	return fs
}

// parseFlags parses args, letting flags follow positional arguments. A bad
// flag or value is a usage error that says what is wrong and where the
// flags are listed, without the whole usage the flag package would print;
// -h prints the usage and returns flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	defer func() { fs.SetOutput(out); fs.Usage = usage }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				usage()
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v\nrun \"%s -h\" for its flags", errUsage, err, fs.Name())
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// setFlags lists the flags of fs given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// checkOutputs refuses, before any work, flags that contradict each other
// about the report's form or would send two outputs to standard output.
// report is the -format value after -json.
func checkOutputs(fs *flag.FlagSet, format string, html, snapshotOut string) error {
	set := setFlags(fs)
	if set["json"] && set["format"] && format != "json" {
		return fmt.Errorf("%w: -json and -format %s contradict each other: give one", errUsage, fs.Lookup("format").Value)
	}
	if html == "-" && (set["json"] || set["format"]) {
		return fmt.Errorf("%w: -html - writes the HTML report to standard output in place of the text or JSON one: drop -json/-format, or give -html a FILE", errUsage)
	}
	if snapshotOut == "-" {
		return fmt.Errorf("%w: -snapshot-out - would mix the binary snapshot with the report on standard output: give -snapshot-out a FILE", errUsage)
	}
	return nil
}

// checkWritable refuses an output path that cannot be written, before the
// work that would fill it runs: its folder must exist and take a new file,
// and an existing path must be a writable file. "" and "-" pass. The
// message names the flag and the path the user gave, and what is wrong
// with them (outputError), never the probe file the check creates.
func checkWritable(flagName, path string) error {
	if path == "" || path == "-" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return fmt.Errorf("%w: %s %s is a folder: give a file name", errUsage, flagName, path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return outputError(flagName, path, err)
		}
		return f.Close()
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".gpumem-check-*")
	if err != nil {
		return outputError(flagName, path, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// outputError says why the output flagName path cannot be written, in the
// user's terms: the path they gave and its folder, with the system's
// reason but not the file name it was given with (an internal probe file,
// or the path again). A folder that does not exist, or a folder given
// where a file is wanted, is a usage error; a refused permission or a full
// disk is not.
func outputError(flagName, path string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	dir := filepath.Dir(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %s %s: the folder %s does not exist", errUsage, flagName, path, dir)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%w: %s %s is a folder: give a file name", errUsage, flagName, path)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: %s %s: %s is not a folder", errUsage, flagName, path, dir)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%s %s cannot be written: permission denied (the file, or a new file in %s)", flagName, path, dir)
	}
	return fmt.Errorf("%s %s cannot be written: %w", flagName, path, err)
}

func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gpumem replay", stdout)
	backend := fs.String("backend", "sim", "storage for gpumem policies: sim (accounting only, any size), host (real bytes, small traces) cuda (device memory through the CUDA driver; $GPUMEM_LIBCUDA picks the library) or vulkan (device memory through the Vulkan loader; $GPUMEM_VULKAN_DEVICE picks the device)")
	var capacity, overhead sizeFlag
	fs.Var(&capacity, "capacity", "say whether each policy fits a device of `SIZE` (e.g. 80GB or 24GiB; at least 1MiB): "+sizeHelp)
	fs.Var(&overhead, "overhead", "device memory outside the allocator (CUDA context, library workspaces), `SIZE`; the allocator gets -capacity less this")
	requireFit := fs.String("require-fit", "", "exit with status 3 unless `POLICY` fits -capacity (for scripts)")
	maxSnapshot := sizeFlag{v: trace.DefaultMaxSnapshotBytes}
	fs.Var(&maxSnapshot, "max-snapshot", "refuse a snapshot larger than `SIZE` once decompressed")
	device := fs.Int("device", -1, "replay only device `N` of a snapshot (default: each device with data, one report each)")
	format := fs.String("format", "text", "output: text or json")
	jsonOut := fs.Bool("json", false, "same as -format json")
	htmlOut := fs.String("html", "", "also write a standalone HTML report to `FILE` (- for standard output, in place of the text)")
	wide := fs.Bool("wide", false, "text report on one row of column groups, however wide (default: at most 120 columns, groups stacked)")
	policies := fs.String("policies", strings.Join(compare.Policies(), ","), "comma-separated policies to run; torch:CONF runs PyTorch's model with CONF in PYTORCH_CUDA_ALLOC_CONF syntax (torch:defaults for its defaults)")
	torchConf := fs.String("torch-conf", "", "settings of the torch policy, in PYTORCH_CUDA_ALLOC_CONF syntax such as `CONF` expandable_segments:True,max_split_size_mb:128 (default: the settings the snapshot recorded, else PyTorch's defaults)")
	bandwidth := rateFlag{v: compare.DefaultBandwidth}
	fs.Var(&bandwidth, "bandwidth", "device copy bandwidth for the relocation time estimate, `RATE` such as 2TB/s, 900GB/s or 2e12 (B/s)")
	noSearch := fs.Bool("no-search", false, "skip the smallest-capacity search")
	noCompact := fs.Bool("nocompact", false, "gpumem policies never compact current pages (to see what compaction buys)")
	failOnOOM := fs.Bool("fail-on-oom", false, "exit 1 when a policy fails an allocation, at unlimited capacity or at -capacity")
	quiet := fs.Bool("quiet", false, "no progress bar")
	snapshotOut := fs.String("snapshot-out", "", "also write the device of one policy's replay, with its history, as a PyTorch memory snapshot to `FILE` for pytorch.org/memory_viz")
	snapshotPolicy := fs.String("snapshot-policy", compare.Adaptive, "the gpumem `POLICY` whose replay -snapshot-out writes")
	frames := fs.Int("frames", defaultFrames, framesHelp)
	setUsage(fs, replayUsage)
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("%w: replay takes at most one FILE, got %d", errUsage, len(pos))
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("%w: -format %q: want text or json", errUsage, *format)
	}
	if err := checkOutputs(fs, *format, *htmlOut, *snapshotOut); err != nil {
		return err
	}
	if *jsonOut {
		*format = "json"
	}
	if *backend != "sim" && *backend != "host" && *backend != "cuda" && *backend != "vulkan" {
		return fmt.Errorf("%w: -backend %q: want sim, host, cuda or vulkan", errUsage, *backend)
	}
	if capacity.set && capacity.v < 1<<20 {
		return fmt.Errorf("%w: -capacity %d B is below 1 MiB (omit -capacity for an unlimited device)", errUsage, capacity.v)
	}
	if overhead.set && !capacity.set {
		return fmt.Errorf("%w: -overhead needs -capacity (the device it is part of)", errUsage)
	}
	if capacity.set && overhead.v >= capacity.v {
		return fmt.Errorf("%w: -overhead %s leaves nothing of -capacity %s", errUsage, units.Bytes(overhead.v), units.Bytes(capacity.v))
	}
	if *requireFit != "" {
		if !capacity.set {
			return fmt.Errorf("%w: -require-fit needs -capacity (the device to fit)", errUsage)
		}
		if !slices.Contains(compare.ParsePolicies(*policies), *requireFit) {
			return fmt.Errorf("%w: -require-fit %q is not among -policies %s", errUsage, *requireFit, *policies)
		}
	}
	if err := errors.Join(checkMaxSnapshot(maxSnapshot), checkDevice(*device, fs), checkFrames(*frames)); err != nil {
		return err
	}
	if *snapshotOut != "" && !slices.Contains(compare.SnapshotPolicies(), *snapshotPolicy) {
		return fmt.Errorf("%w: -snapshot-policy %q: want one of %s", errUsage, *snapshotPolicy, strings.Join(compare.SnapshotPolicies(), ", "))
	}
	if *snapshotOut != "" && *snapshotOut == *htmlOut {
		return fmt.Errorf("%w: -snapshot-out and -html name the same file %q", errUsage, *snapshotOut)
	}
	if err := errors.Join(checkWritable("-html", *htmlOut), checkWritable("-snapshot-out", *snapshotOut)); err != nil {
		return err
	}
	var open func(...gpumem.Option) (*gpumem.Device, error)
	var alignment uint64
	if *backend == "cuda" {
		if err := cuda.Available(); err != nil {
			return fmt.Errorf("no CUDA driver found: %w", err)
		}
		open = func(o ...gpumem.Option) (*gpumem.Device, error) { return cuda.OpenDevice(cuda.Options{}, o...) }
		alignment = cuda.Alignment
	}
	if *backend == "vulkan" {
		if open, alignment, err = vulkanOpen(); err != nil {
			return err
		}
	}
	path := ""
	if len(pos) == 1 {
		path = pos[0]
	}
	ins, err := readInputs(path, inputOptions{maxSnapshot: int64(maxSnapshot.v), device: *device})
	if err != nil {
		return err
	}
	if err := errors.Join(checkOneDevice("-html", *htmlOut, path, ins), checkOneDevice("-snapshot-out", *snapshotOut, path, ins)); err != nil {
		return err
	}
	opts := compare.Options{
		Policies:     compare.ParsePolicies(*policies),
		Bandwidth:    bandwidth.v,
		SkipCapacity: *noSearch,
		NoCompact:    *noCompact,
		Host:         *backend == "host",
		Capacity:     capacity.v,
		Overhead:     overhead.v,
		Open:         open,
		Alignment:    alignment,
		Frames:       *frames,
	}
	if *htmlOut != "" {
		opts.Timeline = 1500
	}
	opts.CapacityNotes = capacityNotes(capacity, overhead)
	progress, progressDone := progressTo(*quiet, stderr)
	defer progressDone()
	opts.Progress = progress
	// One Comparison per device with data (one for a native trace).
	cs := make([]*compare.Comparison, len(ins))
	err = eachDevice(ins, opts, *torchConf, func(i int, in input, o compare.Options) (err error) {
		cs[i], err = compare.Run(ctx, in.src, o)
		if isPolicyError(err) {
			return fmt.Errorf("%w: -policies: %v", errUsage, err)
		}
		return err
	})
	if err != nil {
		return err
	}
	if several(ins) {
		reports := deviceReportsOf(ins, cs, *format == "json", textWidth(*wide))
		if err := writeDeviceReports(stdout, path, *format == "json", textWidth(*wide), reports); err != nil {
			return err
		}
		return replayExits(ins, cs, *failOnOOM, *requireFit, capacity)
	}
	src, c := ins[0].src, cs[0]
	if err := setTorchSettings(&opts, src, *torchConf); err != nil {
		return err
	}
	switch {
	case *htmlOut == "-":
	case *format == "json":
		err = c.WriteJSON(stdout)
	default:
		err = c.WriteTextWidth(stdout, textWidth(*wide))
	}
	if err != nil {
		return err
	}
	if *htmlOut != "" {
		if err := writeOutput("-html", *htmlOut, stdout, c.WriteHTML); err != nil {
			return err
		}
	}
	if *snapshotOut != "" {
		err := writeOutput("-snapshot-out", *snapshotOut, stdout, func(w io.Writer) error {
			return compare.WriteSnapshot(ctx, src, *snapshotPolicy, opts, w)
		})
		if isPolicyError(err) {
			return fmt.Errorf("%w: -snapshot-policy: %v", errUsage, err)
		}
		if err != nil {
			return err
		}
	}
	return replayExits(ins, cs, *failOnOOM, *requireFit, capacity)
}

// replayExits is replay's exit for its comparisons cs of ins (one per
// device): an error under -fail-on-oom when a policy failed an allocation
// at unlimited capacity or runs out at -capacity, errNoFit under
// -require-fit when the policy does not fit -capacity, on any device (each
// named when there are several).
func replayExits(ins []input, cs []*compare.Comparison, failOnOOM bool, requireFit string, capacity sizeFlag) error {
	for i, c := range cs {
		if c == nil {
			continue
		}
		on := ""
		if several(ins) {
			on = fmt.Sprintf(" on device %d", ins[i].snap.Device)
		}
		if failOnOOM {
			for _, p := range c.Policies {
				if p.FailedAllocs > 0 {
					first := ""
					if a := p.FirstFailed; a != nil {
						first = fmt.Sprintf(" (the first at %s)", a)
					}
					return fmt.Errorf("policy %s failed %d allocations at unlimited capacity%s%s", p.Name, p.FailedAllocs, on, first)
				}
			}
		}
		if err := requireFitErr(c, requireFit, capacity, on); err != nil {
			return err
		}
		if failOnOOM {
			if err := outOfMemoryAtCapacity(c, capacity); err != nil {
				if on != "" {
					return fmt.Errorf("device %d: %w", ins[i].snap.Device, err)
				}
				return err
			}
		}
	}
	return nil
}

// requireFitErr is replay -require-fit's answer: errNoFit when policy runs
// out of memory at -capacity (on names the device when there are several).
func requireFitErr(c *compare.Comparison, policy string, capacity sizeFlag, on string) error {
	for _, p := range c.Policies {
		if policy != "" && p.Name == policy && p.Verdict != nil && !p.Verdict.Fits {
			where := fmt.Sprintf("event %d", p.Verdict.OutOfMemory.Event)
			if a := p.Verdict.Allocation; a != nil {
				where = a.String()
			}
			return fmt.Errorf("%w: policy %s runs out of memory%s at %s with -capacity %s", errNoFit, p.Name, on, where, units.Bytes(capacity.v))
		}
	}
	return nil
}

// outOfMemoryAtCapacity is replay -fail-on-oom's answer at -capacity (or
// the capacity a native trace's recording device had, when -capacity is
// not given): an error (exit status 1) naming the policies that ran out of
// memory there,
// the first one's failing allocation, and, when the live tensors alone
// pass the capacity, that none can fit.
func outOfMemoryAtCapacity(c *compare.Comparison, capacity sizeFlag) error {
	var names []string
	var first *compare.PolicyResult
	for i, p := range c.Policies {
		if p.Verdict != nil && !p.Verdict.Fits {
			names = append(names, p.Name)
			if first == nil {
				first = &c.Policies[i]
			}
		}
	}
	if first == nil {
		return nil
	}
	where := fmt.Sprintf("event %d", first.Verdict.OutOfMemory.Event)
	if a := first.Verdict.Allocation; a != nil {
		where = a.String()
	}
	at := "-capacity " + units.Bytes(c.Capacity).String()
	if !capacity.set {
		at = units.Bytes(c.Capacity).String() + ", the trace's recording device's capacity (-capacity judges another)"
	}
	msg := fmt.Sprintf("-fail-on-oom: at %s, %d of %d policies run out of memory (%s); %s first at %s",
		at, len(names), len(c.Policies), strings.Join(names, ", "), first.Name, where)
	if c.LiveOverCapacity > 0 {
		msg += fmt.Sprintf("; peak live %s passes the allocator's %s: no policy can fit, %s of live memory must go", units.Bytes(c.PeakLive), units.Bytes(c.Capacity-c.Overhead), units.Bytes(c.LiveOverCapacity))
	}
	return errors.New(msg)
}

// confEnv is the environment variable PyTorch reads its allocator settings
// from; gpumem reads it too, as the settings a workload runs with when the
// snapshot recorded none.
const confEnv = "PYTORCH_CUDA_ALLOC_CONF"

// eachDevice calls fn for every input with data (ins[i], one per device),
// with opts and that input's torch settings (setTorchSettings); an error
// from fn is named by its device when there are several, unless it is a
// usage error, which names the flag.
func eachDevice(ins []input, opts compare.Options, torchConf string, fn func(i int, in input, o compare.Options) error) error {
	for i, in := range ins {
		if in.nothing != "" {
			continue
		}
		o := opts
		if err := setTorchSettings(&o, in.src, torchConf); err != nil {
			return err
		}
		if err := fn(i, in, o); err != nil {
			if several(ins) && !errors.Is(err, errUsage) {
				err = fmt.Errorf("device %d: %w", in.snap.Device, err)
			}
			return err
		}
	}
	return nil
}

// setTorchSettings sets opts' torch settings from -torch-conf (conf, when
// given) and from PYTORCH_CUDA_ALLOC_CONF in the environment (when set and
// not empty). A bad -torch-conf is a usage error; so is a bad
// environment line where it would be used (no -torch-conf, and a snapshot
// that recorded no allocator_settings), and it is ignored otherwise.
func setTorchSettings(opts *compare.Options, src compare.Source, conf string) error {
	if conf != "" {
		s, err := torch.ParseConf(conf)
		if err != nil {
			return fmt.Errorf("%w: -torch-conf: %w", errUsage, err)
		}
		opts.TorchSettings = &s
	}
	line := strings.TrimSpace(os.Getenv(confEnv))
	if line == "" {
		return nil
	}
	s, err := torch.ParseConf(line)
	switch {
	case err == nil:
		opts.EnvTorchSettings = &s
	case conf == "" && src.TorchSettings == nil:
		return fmt.Errorf("%w: %s=%q in the environment: %w (fix or unset it, or give -torch-conf)", errUsage, confEnv, line, err)
	}
	return nil
}

// capacityNotes are the reports' notes on -capacity and -overhead as the
// user gave them (decimalNote).
func capacityNotes(capacity, overhead sizeFlag) []string {
	var notes []string
	for _, n := range []string{decimalNote("-capacity", capacity), decimalNote("-overhead", overhead)} {
		if n != "" && !strings.HasSuffix(n, "?") {
			n += "."
		}
		if n != "" {
			notes = append(notes, n)
		}
	}
	return notes
}

// textWidth is the text report's line limit: none with -wide.
func textWidth(wide bool) int {
	if wide {
		return 0
	}
	return compare.DefaultTextWidth
}

// isPolicyError reports whether err is about a policy name or a torch:CONF
// setting the user wrote: a usage error.
func isPolicyError(err error) bool {
	var conf *torch.ConfError
	return errors.Is(err, compare.ErrUnknownPolicy) || errors.As(err, &conf)
}

// checkMaxSnapshot refuses a -max-snapshot of 0.
func checkMaxSnapshot(f sizeFlag) error {
	if f.v == 0 {
		return fmt.Errorf("%w: -max-snapshot must be at least 1 byte", errUsage)
	}
	return nil
}

// defaultFrames is -frames' default: the top frames a failing allocation
// shows.
const defaultFrames = 5

const framesHelp = "show the top `N` frames of the stack of each failing allocation of a snapshot, the user's Python frames first (0: none)"

// checkFrames refuses a -frames below 0.
func checkFrames(n int) error {
	if n < 0 {
		return fmt.Errorf("%w: -frames %d: want 0 (no frames) or more", errUsage, n)
	}
	return nil
}

// checkDevice refuses a -device below 0 (-1, the default, means "the
// snapshot's one device").
func checkDevice(device int, fs *flag.FlagSet) error {
	if setFlags(fs)["device"] && device < 0 {
		return fmt.Errorf("%w: -device %d: want a device index, 0 or more", errUsage, device)
	}
	return nil
}

// writeOutput writes through fn to path, the value of the output flag
// flagName, or to stdout when path is "-".
func writeOutput(flagName, path string, stdout io.Writer, fn func(io.Writer) error) error {
	if path == "-" {
		return fn(stdout)
	}
	return writeFile(flagName, path, fn)
}

// writeFile writes through fn to path, removing a partial file on error;
// a path that cannot be created is named with its flag (outputError).
func writeFile(flagName, path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return outputError(flagName, path, err)
	}
	if err := fn(f); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

func convertCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gpumem convert", stdout)
	setUsage(fs, convertUsage)
	out := fs.String("o", "", "write the trace to `FILE` (required; - for standard output)")
	noPrelude := fs.Bool("no-prelude", false, "do not rebuild allocations made before the snapshot's window")
	maxSnapshot := sizeFlag{v: trace.DefaultMaxSnapshotBytes}
	fs.Var(&maxSnapshot, "max-snapshot", "refuse a snapshot larger than `SIZE` once decompressed")
	device := fs.Int("device", -1, "convert device `N` of a snapshot (default: its one device with data; needed when it holds data for several)")
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) != 1 || *out == "" {
		return fmt.Errorf("%w: gpumem convert SNAPSHOT -o TRACE.jsonl", errUsage)
	}
	if err := errors.Join(checkMaxSnapshot(maxSnapshot), checkDevice(*device, fs), checkWritable("-o", *out)); err != nil {
		return err
	}
	// The input is read as replay reads it (readInput), so the same file
	// gets the same message from either command.
	in, err := readInput(pos[0], inputOptions{maxSnapshot: int64(maxSnapshot.v), device: *device, noPrelude: *noPrelude})
	if err != nil {
		return err
	}
	snap := in.snap
	if snap == nil {
		return fmt.Errorf("%w: %s is a gpumem trace already: convert writes a PyTorch snapshot's events as one; replay and advise read it as it is", errUsage, pos[0])
	}
	err = writeOutput("-o", *out, stdout, func(w io.Writer) error {
		enc := trace.NewEncoder(w)
		if err := enc.WriteHeader(trace.Header{Format: trace.Format, Version: trace.Version, Source: inputWhere(pos[0]), Streams: snap.Streams}); err != nil {
			return err
		}
		for _, e := range snap.Events {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	msg := messages(*out, stdout, stderr)
	fmt.Fprintf(msg, "wrote %d events (%d streams, %d prelude allocations, %d cleanups, peak live %s) to %s\n",
		len(snap.Events), snap.Streams, snap.Counts.Prelude, snap.Counts.Cleanups, units.Bytes(snap.PeakLive), outName(*out))
	for _, l := range compare.ReleaseLines(snap) {
		fmt.Fprintln(msg, l)
	}
	if c := snap.Capacity; c.Known() {
		// A native trace has no place for it, nor for the settings (its
		// header's device is a gpumem device's): the user passes them on.
		flags := fmt.Sprintf("-capacity %dB", c.Bytes)
		if snap.AllocatorSettings != nil {
			if set, err := torch.SettingsFromSnapshot(snap.AllocatorSettings); err == nil && set.String() != "" {
				flags += " -torch-conf " + set.String()
			}
		}
		fmt.Fprintf(msg, "the JSONL trace carries neither that capacity nor the allocator's settings: replay it with %s to run as the recording did\n", flags)
	}
	return nil
}

func synthCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gpumem synth", stdout)
	setUsage(fs, synthUsage)
	workload := fs.String("workload", "", "`NAME`: one of "+strings.Join(trace.Workloads(), ", "))
	seed := fs.Uint64("seed", 1, "random seed (same seed, same bytes)")
	allocs := fs.Int("allocs", 0, fmt.Sprintf("approximate number of allocations (0 = default 2000, at most %d)", trace.MaxSynthAllocs))
	streams := fs.Int("streams", 0, "streams of multistream (0 = default)")
	out := fs.String("o", "", "write the trace to `FILE` (required; - for standard output)")
	maxOutput := sizeFlag{v: defaultMaxOutput}
	fs.Var(&maxOutput, "max-output", "stop and remove the output once it would pass `SIZE`")
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) != 0 || *out == "" || *workload == "" {
		return fmt.Errorf("%w: gpumem synth -workload NAME [-seed N] -o TRACE.jsonl", errUsage)
	}
	if *allocs < 0 || *allocs > trace.MaxSynthAllocs {
		return fmt.Errorf("%w: -allocs %d: want 0 (the default) to %d", errUsage, *allocs, trace.MaxSynthAllocs)
	}
	if maxOutput.v == 0 {
		return fmt.Errorf("%w: -max-output must be at least 1 byte", errUsage)
	}
	if err := checkWritable("-o", *out); err != nil {
		return err
	}
	events, err := trace.Synth(*workload, *seed, trace.SynthParams{Allocs: *allocs, Streams: *streams})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	n := 0
	err = writeOutput("-o", *out, stdout, func(w io.Writer) error {
		enc := trace.NewEncoder(&cappedWriter{w: w, limit: maxOutput.v})
		if err := enc.WriteHeader(trace.Header{Format: trace.Format, Version: trace.Version, Source: fmt.Sprintf("synth %s seed %d", *workload, *seed)}); err != nil {
			return err
		}
		for e := range events {
			if err := enc.Encode(e); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(messages(*out, stdout, stderr), "wrote %d events of %s (seed %d) to %s\n", n, *workload, *seed, outName(*out))
	return nil
}

func infoCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gpumem info", stdout)
	setUsage(fs, infoUsage)
	if _, err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	for _, b := range []struct {
		name string
		sim  bool
	}{{"host", false}, {"sim", true}} {
		var opts []gpumem.Option
		if b.sim {
			opts = append(opts, gpumem.WithSim())
		}
		dev, err := gpumem.Open(opts...)
		if err != nil {
			return err
		}
		p := dev.Properties()
		capacity := capacityString(p.MaxMemory)
		if !b.sim && p.MaxMemory == 0 {
			// Without WithCapacity host storage draws on the machine's
			// memory: say how much, and where the figure comes from.
			if l := hoststorage.MachineMemoryLimit(); l.Bytes != 0 {
				capacity = fmt.Sprintf("%s (the machine's memory: %s)", units.Bytes(l.Bytes), l.From)
			}
		}
		fmt.Fprintf(stdout, "%-5s available: alignment %d B, max page %s, capacity %s\n", b.name, p.Alignment, units.Bytes(p.MaxPageSize), capacity)
		dev.Close()
	}
	fmt.Fprintln(stdout, cudaInfo())
	fmt.Fprintln(stdout, vulkanInfo())
	return nil
}

func capacityString(n uint64) string {
	if n == 0 {
		return "unlimited"
	}
	return units.Bytes(n).String()
}

func adviseCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gpumem advise", stdout)
	setUsage(fs, adviseUsage)
	var capacity, overhead sizeFlag
	fs.Var(&capacity, "capacity", "say which settings fit a device of `SIZE` and the PYTORCH_CUDA_ALLOC_CONF line to use: "+sizeHelp)
	fs.Var(&overhead, "overhead", "device memory outside the allocator, `SIZE`; the allocator gets -capacity less this")
	maxSnapshot := sizeFlag{v: trace.DefaultMaxSnapshotBytes}
	fs.Var(&maxSnapshot, "max-snapshot", "refuse a snapshot larger than `SIZE` once decompressed")
	device := fs.Int("device", -1, "advise on device `N` of a snapshot only (default: each device with data, one report each)")
	format := fs.String("format", "text", "output: text or json")
	jsonOut := fs.Bool("json", false, "same as -format json")
	htmlOut := fs.String("html", "", "also write a standalone HTML report to `FILE` (- for standard output, in place of the text)")
	wide := fs.Bool("wide", false, "text report on one row of column groups, however wide (default: at most 120 columns, groups stacked)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	requireFit := fs.Bool("require-fit", false, "exit with status 3 when no PyTorch setting of the grid fits -capacity (for scripts)")
	torchConf := fs.String("torch-conf", "", "the settings the workload runs with now, in PYTORCH_CUDA_ALLOC_CONF syntax (`CONF`), which \"as it is\" is judged by (default: the settings the snapshot recorded, else PyTorch's defaults)")
	frames := fs.Int("frames", defaultFrames, framesHelp)
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: gpumem advise SNAPSHOT [-capacity SIZE]", errUsage)
	}
	if *requireFit && !capacity.set {
		return fmt.Errorf("%w: -require-fit needs -capacity (the device to fit)", errUsage)
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("%w: -format %q: want text or json", errUsage, *format)
	}
	if err := checkOutputs(fs, *format, *htmlOut, ""); err != nil {
		return err
	}
	if err := checkWritable("-html", *htmlOut); err != nil {
		return err
	}
	if *jsonOut {
		*format = "json"
	}
	if capacity.set && capacity.v < 1<<20 {
		return fmt.Errorf("%w: -capacity %d B is below 1 MiB", errUsage, capacity.v)
	}
	if overhead.set && (!capacity.set || overhead.v >= capacity.v) {
		return fmt.Errorf("%w: -overhead needs a -capacity larger than it", errUsage)
	}
	if err := errors.Join(checkMaxSnapshot(maxSnapshot), checkDevice(*device, fs), checkFrames(*frames)); err != nil {
		return err
	}
	ins, err := readInputs(pos[0], inputOptions{maxSnapshot: int64(maxSnapshot.v), device: *device})
	if err != nil {
		return err
	}
	if err := checkOneDevice("-html", *htmlOut, pos[0], ins); err != nil {
		return err
	}
	opts := compare.Options{Capacity: capacity.v, Overhead: overhead.v, Frames: *frames, CapacityNotes: capacityNotes(capacity, overhead)}
	if *htmlOut != "" {
		opts.Timeline = 1500
	}
	progress, progressDone := progressTo(*quiet, stderr)
	defer progressDone()
	opts.Progress = progress
	// One Advice per device with data (one for a native trace).
	as := make([]*compare.Advice, len(ins))
	err = eachDevice(ins, opts, *torchConf, func(i int, in input, o compare.Options) (err error) {
		as[i], err = compare.Advise(ctx, in.src, o)
		return err
	})
	if err != nil {
		return err
	}
	if several(ins) {
		reports := deviceReportsOf(ins, as, *format == "json", textWidth(*wide))
		var noFit []string
		for i, in := range ins {
			if a := as[i]; a != nil && a.NoneFits() {
				noFit = append(noFit, fmt.Sprint(in.snap.Device))
			}
		}
		if err := writeDeviceReports(stdout, pos[0], *format == "json", textWidth(*wide), reports); err != nil {
			return err
		}
		if *requireFit && len(noFit) > 0 {
			return fmt.Errorf("%w: no PyTorch setting of the grid fits -capacity %s on device %s", errNoFit, units.Bytes(capacity.v), strings.Join(noFit, ", "))
		}
		return nil
	}
	a := as[0]
	switch {
	case *htmlOut == "-":
	case *format == "json":
		err = a.WriteJSON(stdout)
	default:
		err = a.WriteTextWidth(stdout, textWidth(*wide))
	}
	if err != nil {
		return err
	}
	if *htmlOut != "" {
		if err := writeOutput("-html", *htmlOut, stdout, a.WriteHTML); err != nil {
			return err
		}
	}
	if *requireFit && a.NoneFits() {
		return fmt.Errorf("%w: no PyTorch setting of the grid fits -capacity %s", errNoFit, units.Bytes(capacity.v))
	}
	return nil
}
