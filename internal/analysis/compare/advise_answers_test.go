package compare

import (
	"bytes"
	"context"
	"encoding/json"
	htmlpkg "html"
	"regexp"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
)

// flat is text with its line breaks and indents folded to single spaces,
// so a wrapped sentence is found whole.
func flat(text string) string { return strings.Join(strings.Fields(text), " ") }

// When the live tensors alone pass the capacity (flushTrace peaks at 4 GiB
// live), no setting can fit: advise says so first, before the verdict of
// the settings in use and the table of failing settings, with how much
// live memory must go and how users shed it; the JSON carries the figure
// at the top and in the comparison. With -overhead the capacity that
// counts is the allocator's. Above the peak live bytes nothing is said.
func TestAdviseSaysFirstThatNoSettingCanFitWhenLiveTensorsPassTheCapacity(t *testing.T) {
	a := adviseAt(t, flushTrace(), 3<<30)
	if a.LiveOverCapacity != 1<<30 || a.Comparison.LiveOverCapacity != 1<<30 || !a.NoneFits() {
		t.Fatalf("live over capacity %d (comparison %d), decision %q: want 1 GiB and none fits", a.LiveOverCapacity, a.Comparison.LiveOverCapacity, a.Decision)
	}
	text := adviceText(t, a)
	want := "no allocator setting can fit 3.00 GiB: the live tensors alone peak at 4.00 GiB, 1.00 GiB more. That much live memory must go at the peak, whatever the allocator does: a smaller batch or sequence length, activation checkpointing, or offloading"
	at := strings.Index(flat(text), want)
	if at < 0 {
		t.Fatalf("no %q in:\n%s", want, text)
	}
	for _, later := range []string{"as it is:", "do not fit", "setting (PYTORCH_CUDA_ALLOC_CONF)", "no PyTorch setting of the grid fits 3.00 GiB, nor can any"} {
		if i := strings.Index(flat(text), later); i < at {
			t.Fatalf("%q at %d, not after the live-over-capacity answer at %d:\n%s", later, i, at, text)
		}
	}
	var out bytes.Buffer
	if err := a.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Live       uint64 `json:"live_over_capacity_bytes"`
		Comparison struct {
			Live uint64 `json:"live_over_capacity_bytes"`
		} `json:"comparison"`
	}
	if err := json.Unmarshal(out.Bytes(), &j); err != nil || j.Live != 1<<30 || j.Comparison.Live != 1<<30 {
		t.Fatalf("JSON live_over_capacity_bytes %d, comparison's %d (%v)", j.Live, j.Comparison.Live, err)
	}

	// 4.5 GiB less 1 GiB of overhead leaves the allocator 3.5 GiB.
	o, err := Advise(context.Background(), Source{Name: "hand-written", Events: flushTrace()}, Options{Capacity: 9 << 29, Overhead: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if o.LiveOverCapacity != 1<<29 || !strings.Contains(flat(adviceText(t, o)), "no allocator setting can fit the 3.50 GiB the allocator has (-capacity less -overhead): the live tensors alone peak at 4.00 GiB, 512.00 MiB more") {
		t.Fatalf("with -overhead: live over capacity %d:\n%s", o.LiveOverCapacity, adviceText(t, o))
	}

	above := adviseAt(t, flushTrace(), 16<<30)
	if above.LiveOverCapacity != 0 || strings.Contains(adviceText(t, above), "can fit") {
		t.Fatalf("at 16 GiB: live over capacity %d:\n%s", above.LiveOverCapacity, adviceText(t, above))
	}
}

// replay's report says the same before its table, of every policy, and its
// JSON carries live_over_capacity_bytes.
func TestReplaySaysNoPolicyCanFitWhenLiveTensorsPassTheCapacity(t *testing.T) {
	c, err := Run(context.Background(), Source{Name: "hand-written", Events: flushTrace()}, Options{Policies: []string{Adaptive, Torch}, Capacity: 3 << 30, SkipCapacity: true})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	f := flat(text.String())
	at := strings.Index(f, "no policy and no allocator setting can fit 3.00 GiB: the live tensors alone peak at 4.00 GiB, 1.00 GiB more")
	if at < 0 || at > strings.Index(f, "peak reserved") {
		t.Fatalf("the live-over-capacity answer is missing or after the table:\n%s", text.String())
	}
	var out bytes.Buffer
	if err := c.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"live_over_capacity_bytes": 1073741824`) {
		t.Fatalf("JSON:\n%s", out.String())
	}
	var page strings.Builder
	if err := c.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "no policy and no allocator setting can fit 3.00 GiB") {
		t.Fatal("the HTML page does not say that nothing can fit")
	}
}

// The answer says what the capacity counts: without -overhead only what
// the allocator reserves (the CUDA context and memory outside it are not
// counted, and how to measure them); with it, what it sets aside. A margin
// under the worth-a-change threshold is called tight, one above it is not.
func TestAdviseSaysWhatTheCapacityCountsAndCallsSmallMarginsTight(t *testing.T) {
	d := policyOf(t, adviseAt(t, flushTrace(), 16<<30), defaultsPolicy)
	a := adviseAt(t, flushTrace(), d.MinDevice+256<<20)
	text := flat(adviceText(t, a))
	for _, want := range []string{
		"counts only what PyTorch's caching allocator reserves: the CUDA context (a few hundred MiB) and the framework's memory outside the allocator",
		"are not counted; -overhead SIZE sets them aside",
		"PyTorch's defaults fit, with 256.00 MiB of margin",
		"tight: under 1.00 GiB, a change's worth, and the CUDA context, not counted, takes a few hundred MiB of it",
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("no %q in:\n%s", want, adviceText(t, a))
		}
	}
	if !a.TightMargin || a.Recommended != defaultsPolicy {
		t.Fatalf("tight %v, recommended %s", a.TightMargin, a.Recommended)
	}

	roomy := adviseAt(t, flushTrace(), d.MinDevice+2<<30)
	if roomy.TightMargin || strings.Contains(adviceText(t, roomy), "tight") {
		t.Fatalf("2 GiB of margin called tight:\n%s", adviceText(t, roomy))
	}

	o, err := Advise(context.Background(), Source{Name: "hand-written", Events: flushTrace()}, Options{Capacity: d.MinDevice + 1<<30 + 256<<20, Overhead: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	text = flat(adviceText(t, o))
	if !strings.Contains(text, "-overhead sets 1.00 GiB aside for the CUDA context and memory outside the allocator") || strings.Contains(text, "not counted") {
		t.Fatalf("with -overhead:\n%s", adviceText(t, o))
	}
	if !strings.Contains(text, "tight: under 1.00 GiB, a change's worth)") {
		t.Fatalf("with -overhead, 256 MiB of margin is tight, without the uncounted context:\n%s", adviceText(t, o))
	}
}

// summary is the advice's `*` and `>` lines, unwrapped.
func summary(t *testing.T, text string) (smallest, recommended string) {
	t.Helper()
	var cur *string
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "* "):
			cur = &smallest
			*cur = l
		case strings.HasPrefix(l, "> "):
			cur = &recommended
			*cur = l
		case cur != nil && strings.HasPrefix(l, "  "):
			*cur += " " + strings.TrimSpace(l)
		default:
			cur = nil
		}
	}
	return smallest, recommended
}

var confLine = regexp.MustCompile(`PYTORCH_CUDA_ALLOC_CONF=\S+`)

// checkOneRecommendation checks that the summary lines never disagree: the
// `*` line names no PYTORCH_CUDA_ALLOC_CONF= line to use, the `>` line
// names the recommendation's (or unsets it for the defaults), and a `*`
// setting that is not the recommendation says why.
func checkOneRecommendation(t *testing.T, a *Advice) {
	t.Helper()
	text := adviceText(t, a)
	smallest, recommended := summary(t, text)
	if confLine.MatchString(smallest) {
		t.Fatalf("the * line names a line to use: %q\n%s", smallest, text)
	}
	if a.UseLine == "" {
		if recommended != "" {
			t.Fatalf("a > line without a recommendation: %q", recommended)
		}
		return
	}
	if !strings.Contains(recommended, a.UseLine) {
		t.Fatalf("> line %q, want the use line %q\n%s", recommended, a.UseLine, text)
	}
	if got := confLine.FindAllString(recommended, -1); len(got) > 1 {
		t.Fatalf("> line names %q", got)
	}
	if a.BestPolicy != "" && a.BestPolicy != a.Recommended && !strings.Contains(smallest, "recommendation") {
		t.Fatalf("the * line's %s is not the recommended %s and does not say why: %q", a.BestPolicy, a.Recommended, smallest)
	}
	html := htmlOf(t, a)
	if s, _ := a.summaryLines(); !strings.Contains(html, htmlpkg.EscapeString(s)) {
		t.Fatalf("the HTML page lacks the * line %q", s)
	}
}

func htmlOf(t *testing.T, a *Advice) string {
	t.Helper()
	var b strings.Builder
	if err := a.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// One recommendation, with or without a capacity: a setting is named to
// use only when it gains a change's worth over the settings in use (the
// issue's case: max_split_size_mb:128 for 20 MiB without -capacity); the
// `*` and `>` lines never disagree, at capacities around the settings'
// smallest devices.
func TestAdviseMakesOneRecommendation(t *testing.T) {
	// Four pinned rounds: the best setting saves a few hundred MiB, under
	// a change's worth.
	small := adviseAt(t, pinnedTrace(4), 0)
	d := policyOf(t, small, defaultsPolicy)
	best := policyOf(t, small, small.BestPolicy)
	if best.Name == defaultsPolicy || d.MinDevice-best.MinDevice >= 1<<30 || d.MinDevice == best.MinDevice {
		t.Fatalf("setup: the best %s needs %d B, the defaults %d B: want a gain under 1 GiB", best.Name, best.MinDevice, d.MinDevice)
	}
	if small.Recommended != defaultsPolicy || small.UseLine != "unset PYTORCH_CUDA_ALLOC_CONF (PyTorch's defaults)" || small.ChangeThreshold != 1<<30 || small.Decision != "" {
		t.Fatalf("without -capacity, a %d B gain: recommended %s, use %q, threshold %d, decision %q", d.MinDevice-best.MinDevice, small.Recommended, small.UseLine, small.ChangeThreshold, small.Decision)
	}
	smallest, recommended := summary(t, adviceText(t, small))
	if !strings.Contains(smallest, "under a change's worth (1.00 GiB), so it is not the recommendation") || !strings.HasPrefix(recommended, "> recommended: unset PYTORCH_CUDA_ALLOC_CONF") {
		t.Fatalf("summary:\n%s\n%s", smallest, recommended)
	}
	checkOneRecommendation(t, small)

	// Sixty-four rounds: the best setting saves gigabytes, and is the
	// recommendation without a capacity too.
	big := adviseAt(t, pinnedTrace(64), 0)
	d, best = policyOf(t, big, defaultsPolicy), policyOf(t, big, big.BestPolicy)
	if d.MinDevice-best.MinDevice < ChangeThreshold(d.MinDevice) {
		t.Fatalf("setup: the best saves %d B", d.MinDevice-best.MinDevice)
	}
	if big.Recommended != big.BestPolicy || big.UseLine != "PYTORCH_CUDA_ALLOC_CONF="+*best.TorchConf || big.Gain == nil || *big.Gain != int64(d.MinDevice-best.MinDevice) {
		t.Fatalf("without -capacity, a %d B gain: recommended %s, use %q, gain %v", d.MinDevice-best.MinDevice, big.Recommended, big.UseLine, big.Gain)
	}
	_, recommended = summary(t, adviceText(t, big))
	if !strings.Contains(recommended, "its smallest device is") || !strings.Contains(recommended, "at least a change's worth") {
		t.Fatalf("> line %q", recommended)
	}
	checkOneRecommendation(t, big)

	for _, tc := range []struct {
		name   string
		events eventLog
		base   *Advice
	}{{"pinned 4", pinnedTrace(4), small}, {"pinned 64", pinnedTrace(64), big}, {"flush", flushTrace(), nil}} {
		base := tc.base
		if base == nil {
			base = adviseAt(t, tc.events, 0)
		}
		d := policyOf(t, base, defaultsPolicy).MinDevice
		b := policyOf(t, base, base.BestPolicy).MinDevice
		for _, capacity := range []uint64{b - 1<<20, b, (b + d) / 2, d, d + 512<<20, d + 4<<30} {
			t.Run(tc.name, func(t *testing.T) { checkOneRecommendation(t, adviseAt(t, tc.events, capacity)) })
		}
	}
}

// "As it is" is judged by -torch-conf's settings, else the snapshot's
// recorded ones, else PYTORCH_CUDA_ALLOC_CONF of the environment, else
// PyTorch's defaults, and the answer always says which; an environment
// line that is not used and differs is named, with how to judge it.
func TestAdviseSaysWhichSettingsAsItIsMeans(t *testing.T) {
	env := mustConf(t, "expandable_segments:True")
	advise := func(src Source, opts Options) *Advice {
		t.Helper()
		opts.Capacity = 8 << 30
		a, err := Advise(context.Background(), src, opts)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	native := Source{Name: "hand-written", Events: pinnedTrace(8)}
	snapshot := Source{Name: "snap", Events: pinnedTrace(8), PyTorch: &PyTorch{}}
	recorded := snapshot
	recorded.TorchSettings = mustConf(t, "max_split_size_mb:128")
	for _, tc := range []struct {
		name     string
		src      Source
		opts     Options
		baseline string
		from     string
		ignored  string
		want     []string
	}{
		{"nothing", native, Options{}, defaultsPolicy, SettingsFromDefaults, "",
			[]string{"as it is: PyTorch's defaults: a gpumem trace records no allocator settings and PYTORCH_CUDA_ALLOC_CONF is not set"}},
		{"snapshot without settings", snapshot, Options{}, defaultsPolicy, SettingsFromDefaults, "",
			[]string{"as it is: PyTorch's defaults: the snapshot recorded no allocator_settings and PYTORCH_CUDA_ALLOC_CONF is not set"}},
		{"environment", snapshot, Options{EnvTorchSettings: env}, torchPrefix + "expandable_segments:True", SettingsFromEnvironment, "",
			[]string{"as it is: expandable_segments:True, from PYTORCH_CUDA_ALLOC_CONF in the environment (the snapshot recorded no allocator_settings)",
				"the settings of PYTORCH_CUDA_ALLOC_CONF (expandable_segments:True) fit", "expandable_segments:True (now)"}},
		{"recorded over environment", recorded, Options{EnvTorchSettings: env}, torchPrefix + "max_split_size_mb:128", SettingsFromSnapshot, "expandable_segments:True",
			[]string{"as it is: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128, as the snapshot recorded them (allocator_settings); PYTORCH_CUDA_ALLOC_CONF in the environment (expandable_segments:True) is not what the snapshot ran with: -torch-conf expandable_segments:True judges it"}},
		{"recorded, environment the same", recorded, Options{EnvTorchSettings: mustConf(t, "max_split_size_mb:128")}, torchPrefix + "max_split_size_mb:128", SettingsFromSnapshot, "",
			[]string{"as the snapshot recorded them (allocator_settings)."}},
		{"-torch-conf over both", recorded, Options{EnvTorchSettings: env, TorchSettings: mustConf(t, "max_split_size_mb:256")}, torchPrefix + "max_split_size_mb:256", SettingsFromTorchConf, "expandable_segments:True",
			[]string{"as it is: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256, the -torch-conf settings; PYTORCH_CUDA_ALLOC_CONF in the environment (expandable_segments:True) is set aside for -torch-conf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := advise(tc.src, tc.opts)
			ignored := ""
			if a.IgnoredEnvConf != nil {
				ignored = *a.IgnoredEnvConf
			}
			if a.Baseline != tc.baseline || a.BaselineFrom != tc.from || ignored != tc.ignored {
				t.Fatalf("baseline %s from %q, ignored environment %q; want %s from %q, %q", a.Baseline, a.BaselineFrom, ignored, tc.baseline, tc.from, tc.ignored)
			}
			text := flat(adviceText(t, a))
			for _, want := range tc.want {
				if !strings.Contains(text, want) {
					t.Fatalf("no %q in:\n%s", want, adviceText(t, a))
				}
			}
			// Without a capacity the answer says which settings too.
			opts := tc.opts
			opts.Capacity = 0
			b, err := Advise(context.Background(), tc.src, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(flat(adviceText(t, b)), tc.want[0]) {
				t.Fatalf("without -capacity, no %q in:\n%s", tc.want[0], adviceText(t, b))
			}
		})
	}
}

// replay's torch policy runs with the same settings: the environment's
// when the snapshot recorded none, and says so.
func TestReplayTorchPolicyTakesTheEnvironmentsSettings(t *testing.T) {
	env, err := torch.ParseConf("expandable_segments:True")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Run(context.Background(), Source{Name: "hand-written", Events: pinnedTrace(8)}, Options{Policies: []string{Torch}, SkipCapacity: true, EnvTorchSettings: &env})
	if err != nil {
		t.Fatal(err)
	}
	if c.TorchSettingsFrom != SettingsFromEnvironment || c.Policies[0].TorchConf == nil || *c.Policies[0].TorchConf != "expandable_segments:True" {
		t.Fatalf("torch settings from %q, conf %v", c.TorchSettingsFrom, c.Policies[0].TorchConf)
	}
	var text strings.Builder
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(flat(text.String()), "(settings from PYTORCH_CUDA_ALLOC_CONF in the environment)") {
		t.Fatalf("report:\n%s", text.String())
	}
}
