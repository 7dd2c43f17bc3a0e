package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/gpumem/gpumem/internal/analysis/compare"
	"github.com/gpumem/gpumem/internal/analysis/trace"
	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
)

const diffUsage = `usage: gpumem diff [flags] A [B]

Why does run B need more memory than run A? Replays both (PyTorch
snapshots or gpumem .jsonl traces; - for standard input) under the same
policies and compares:
peak live; PyTorch's recorded reserve and each policy's peak reserve, the
difference split into live and cached-but-free bytes at each peak; each
policy's smallest capacity; and the difference in peak live by allocation
site (the user's stack frames, as an out-of-memory line shows them;
allocations without frames grouped by size), the live bytes of each site at
A's peak and at B's, which add up exactly to the difference.

Two settings of one run: give one FILE (or the same FILE twice) with
-a-torch-conf and/or -b-torch-conf, e.g.
  gpumem diff -b-torch-conf expandable_segments:True run.pickle`

// defaultSiteFrames is -frames' default for diff: the frames that name a
// site, as many as an out-of-memory line shows.
const defaultSiteFrames = defaultFrames

func diffCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gpumem diff", stdout)
	setUsage(fs, diffUsage)
	aConf := fs.String("a-torch-conf", "", "settings of A's torch policy, in PYTORCH_CUDA_ALLOC_CONF syntax (`CONF`; default: -torch-conf, else the settings A's snapshot recorded, else PyTorch's defaults)")
	bConf := fs.String("b-torch-conf", "", "settings of B's torch policy (`CONF`), as -a-torch-conf for A")
	torchConf := fs.String("torch-conf", "", "settings of both sides' torch policy (`CONF`), unless -a-torch-conf or -b-torch-conf sets a side's")
	policies := fs.String("policies", strings.Join(compare.Policies(), ","), "comma-separated policies to run on both sides; torch:CONF runs PyTorch's model with CONF")
	noSearch := fs.Bool("no-search", false, "skip the smallest-capacity search")
	frames := fs.Int("frames", defaultSiteFrames, "name a site by the top `N` frames of its allocations' stacks, the user's Python frames first (0: group every allocation by size)")
	sites := fs.Int("sites", compare.DefaultDiffSites, "list the `N` sites with the largest difference in the text and HTML reports, the rest summed in one line (0: all; JSON lists all)")
	maxSnapshot := sizeFlag{v: trace.DefaultMaxSnapshotBytes}
	fs.Var(&maxSnapshot, "max-snapshot", "refuse a snapshot larger than `SIZE` once decompressed")
	device := fs.Int("device", -1, "compare device `N` of the snapshots (default: their one device with data; needed when one holds data for several)")
	format := fs.String("format", "text", "output: text or json")
	jsonOut := fs.Bool("json", false, "same as -format json")
	htmlOut := fs.String("html", "", "also write a standalone HTML report to `FILE` (- for standard output, in place of the text)")
	wide := fs.Bool("wide", false, "text report on one row of column groups, however wide (default: at most 120 columns)")
	quiet := fs.Bool("quiet", false, "no progress bar")
	pos, err := parseFlags(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	set := setFlags(fs)
	switch {
	case len(pos) == 0 || len(pos) > 2:
		return fmt.Errorf("%w: diff takes two runs, A and B (or one FILE with -a-torch-conf or -b-torch-conf), got %d\nrun \"gpumem diff -h\" for its flags", errUsage, len(pos))
	case len(pos) == 1:
		pos = append(pos, pos[0])
	}
	same := filepath.Clean(pos[0]) == filepath.Clean(pos[1])
	if same && !set["a-torch-conf"] && !set["b-torch-conf"] {
		return fmt.Errorf("%w: A and B are the same run %s with the same settings: give -a-torch-conf or -b-torch-conf to compare two settings of it", errUsage, pos[0])
	}
	if same && set["a-torch-conf"] && set["b-torch-conf"] && *aConf == *bConf {
		return fmt.Errorf("%w: -a-torch-conf and -b-torch-conf are both %q: A and B would be the same run with the same settings", errUsage, *aConf)
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("%w: -format %q: want text or json", errUsage, *format)
	}
	if err := checkOutputs(fs, *format, *htmlOut, ""); err != nil {
		return err
	}
	if *jsonOut {
		*format = "json"
	}
	if *sites < 0 {
		return fmt.Errorf("%w: -sites %d: want 0 (all) or more", errUsage, *sites)
	}
	if err := errors.Join(checkMaxSnapshot(maxSnapshot), checkDevice(*device, fs), checkFrames(*frames), checkWritable("-html", *htmlOut)); err != nil {
		return err
	}
	opts := compare.DiffOptions{Options: compare.Options{
		Policies: compare.ParsePolicies(*policies), SkipCapacity: *noSearch, Frames: *frames,
	}}
	for _, c := range []struct {
		flag, conf string
		to         **torch.Settings
	}{{"-torch-conf", *torchConf, &opts.TorchSettings}, {"-a-torch-conf", *aConf, &opts.ATorchSettings}, {"-b-torch-conf", *bConf, &opts.BTorchSettings}} {
		if c.conf == "" {
			continue
		}
		s, err := torch.ParseConf(c.conf)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", errUsage, c.flag, err)
		}
		*c.to = &s
	}
	in := inputOptions{maxSnapshot: int64(maxSnapshot.v), device: *device}
	a, err := readInput(pos[0], in)
	if err != nil {
		return err
	}
	b := a
	if !same {
		if b, err = readInput(pos[1], in); err != nil {
			return err
		}
	}
	progress, progressDone := progressTo(*quiet, stderr)
	defer progressDone()
	opts.Progress = progress
	d, err := compare.Diff(ctx, a.src, b.src, opts)
	if isPolicyError(err) {
		return fmt.Errorf("%w: -policies: %v", errUsage, err)
	}
	if err != nil {
		return err
	}
	switch {
	case *htmlOut == "-":
	case *format == "json":
		err = d.WriteJSON(stdout)
	default:
		err = d.WriteTextWidth(stdout, textWidth(*wide), *sites)
	}
	if err != nil {
		return err
	}
	if *htmlOut != "" {
		return writeOutput("-html", *htmlOut, stdout, func(w io.Writer) error { return d.WriteHTML(w, *sites) })
	}
	return nil
}
