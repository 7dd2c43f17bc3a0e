package compare

import (
	"context"
	"encoding/json"
	"io"
	"slices"

	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
)

// AdviceGrid is the PyTorch settings Advise replays, in PYTORCH_CUDA_ALLOC_CONF
// syntax ("defaults" for none): the knobs users turn against
// fragmentation, one at a time at the values commonly tried, and the
// combinations that matter (expandable segments with rounding or garbage
// collection; a split limit with garbage collection, the recipe PyTorch's
// documentation gives). The garbage-collection threshold acts only under a
// capacity: at unlimited capacity it reserves what the defaults do.
var AdviceGrid = []string{
	torchDefaults,
	"expandable_segments:True",
	"max_split_size_mb:64",
	"max_split_size_mb:128",
	"max_split_size_mb:256",
	"max_split_size_mb:512",
	"roundup_power2_divisions:4",
	"roundup_power2_divisions:8",
	"garbage_collection_threshold:0.6",
	"garbage_collection_threshold:0.8",
	"max_split_size_mb:128,garbage_collection_threshold:0.6",
	"expandable_segments:True,roundup_power2_divisions:4",
	"expandable_segments:True,garbage_collection_threshold:0.6",
}

// defaultsPolicy is the grid's row for PyTorch's defaults: what the user
// runs with PYTORCH_CUDA_ALLOC_CONF unset.
const defaultsPolicy = torchPrefix + torchDefaults

// Decisions Advice.Decision takes at a capacity, in the order a user
// asks: does it fit as it is, and would a setting buy something worth a
// change. "The defaults" in their names and here are the settings in use,
// Advice.Baseline: PyTorch's defaults unless the snapshot recorded, or
// -torch-conf named, others.
const (
	// DecisionDefaultsFit: the defaults fit and no setting gains
	// ChangeThreshold of margin over them; keep them.
	DecisionDefaultsFit = "defaults-fit"
	// DecisionWorthAChange: the defaults fit, and the recommended setting
	// gains at least ChangeThreshold of margin.
	DecisionWorthAChange = "worth-a-change"
	// DecisionDefaultsDoNotFit: the defaults run out of memory; the
	// recommended setting fits.
	DecisionDefaultsDoNotFit = "defaults-do-not-fit"
	// DecisionNoneFits: no PyTorch setting of the grid fits.
	DecisionNoneFits = "none-fits"
)

// ChangeThreshold is the margin a setting must gain over PyTorch's
// defaults, when they fit, to be worth a change: the larger of 1 GiB and
// 1 % of the capacity. Less is within what one run differs from the next
// and what the model can promise (it reproduces PyTorch's reserve within
// 2 % on recorded snapshots), and a changed allocator setting is a change
// to a configuration that works.
func ChangeThreshold(capacity uint64) uint64 { return max(1<<30, capacity/100) }

// Advice is Advise's result: the comparison of every grid setting (and of
// the settings in use, when the grid lacks them) with gpumem's adaptive
// policy, the setting that needs the smallest device and, at a capacity,
// the answer: whether the settings in use fit, with what margin and
// headroom, and whether a setting is worth a change.
type Advice struct {
	Comparison *Comparison `json:"comparison"`
	// Best is the PyTorch setting with the smallest smallest-capacity (the
	// earlier row on a tie; the settings in use are a row, last when the
	// grid lacks them), as a conf line ("" = defaults): the
	// smallest-device pick, whatever the capacity.
	Best       string `json:"best_setting"`
	BestPolicy string `json:"best_policy"`
	// Fitting lists the policies that fit Capacity (when given).
	Fitting []string `json:"fitting,omitempty"`

	// Baseline is the policy of the settings the workload runs with now,
	// against which "as it is" is judged: the grid's row of Options'
	// TorchSettings (advise -torch-conf), else of the settings the snapshot
	// recorded (allocator_settings), else of PYTORCH_CUDA_ALLOC_CONF in
	// gpumem's environment (Options.EnvTorchSettings), else PyTorch's
	// defaults (torchBase); the torch policy when the grid has no such row.
	// BaselineFrom says which (a SettingsFrom constant), BaselineConf its
	// conf line ("" = the defaults).
	Baseline     string `json:"baseline_policy"`
	BaselineConf string `json:"baseline_setting"`
	BaselineFrom string `json:"baseline_from"`
	// IgnoredEnvConf is PYTORCH_CUDA_ALLOC_CONF of gpumem's environment
	// when it is set, differs from the baseline and was not used (the
	// snapshot recorded its settings, or -torch-conf named others): the
	// text says so and how to judge it.
	IgnoredEnvConf *string `json:"ignored_environment_setting,omitempty"`
	// LiveOverCapacity is the comparison's (how far the peak live bytes
	// pass the allocator's capacity): when set, no setting can fit and
	// that much live memory must go.
	LiveOverCapacity uint64 `json:"live_over_capacity_bytes,omitempty"`

	// The answer at Comparison.Capacity; absent without a capacity.
	//
	// Defaults is the verdict of the baseline settings there (PyTorch's
	// defaults unless Baseline says otherwise; its Margin and Headroom are
	// the room left). The name stays for the JSON field's readers.
	Defaults *Verdict `json:"defaults_verdict,omitempty"`
	// ChangeThreshold is ChangeThreshold(Capacity); without a capacity,
	// ChangeThreshold of the baseline's smallest device.
	ChangeThreshold uint64 `json:"worth_a_change_bytes,omitempty"`
	// TightMargin says the recommended setting (the baseline when it fits
	// and no setting is worth a change) fits the capacity with less margin
	// than ChangeThreshold: within what one run differs from the next.
	TightMargin bool `json:"tight_margin,omitempty"`
	// Decision is one of the Decision constants.
	Decision string `json:"decision,omitempty"`
	// Recommended is the policy to run with (Baseline when the settings in
	// use already fit), RecommendedConf its conf line, Gain the
	// margin it gains over the defaults (both fit only); absent when none
	// fits. Without a capacity, the smallest-device pick when it needs at
	// least ChangeThreshold less than the baseline, else the baseline, and
	// Gain the difference of their smallest devices. One recommendation:
	// the text's and the HTML's last lines name no other setting to use.
	Recommended     string  `json:"recommended_policy,omitempty"`
	RecommendedConf *string `json:"recommended_setting,omitempty"`
	Gain            *int64  `json:"margin_gain_bytes,omitempty"`
	// UseLine is the environment line for the recommendation.
	UseLine string `json:"use,omitempty"`
}

// Advise replays the trace under gpumem's adaptive policy and PyTorch's
// model under every AdviceGrid setting, in parallel (one replay and
// capacity search per setting), picks the PyTorch setting that needs the
// smallest device and, given opts.Capacity, answers for it (see decide).
// opts.Policies is ignored.
func Advise(ctx context.Context, src Source, opts Options) (*Advice, error) {
	policies := []string{Adaptive}
	for _, conf := range AdviceGrid {
		policies = append(policies, torchPrefix+conf)
	}
	baseline, baselineConf, baselineFrom := adviceBaseline(src, opts)
	if !slices.Contains(policies, baseline) {
		policies = append(policies, baseline)
	}
	results := make([]*Comparison, len(policies))
	errs := make([]error, len(policies))
	progress := oneAtATime(opts.Progress)
	sideBySide(len(policies), func(i int) {
		o := opts
		o.Policies = []string{policies[i]}
		o.Frames = 0 // read once, for all of them, below
		o.noAddressDependence = true
		o.Progress = progress
		results[i], errs[i] = run(ctx, src, o, false)
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	c := results[0]
	for _, r := range results[1:] {
		c.Policies = append(c.Policies, r.Policies...)
	}
	if err := c.explainFits(ctx, src, opts, false); err != nil {
		return nil, err
	}
	c.addFrames(src, opts.Frames)
	a := &Advice{Comparison: c, Baseline: baseline, BaselineConf: baselineConf, BaselineFrom: baselineFrom, LiveOverCapacity: c.LiveOverCapacity}
	if e := opts.EnvTorchSettings; e != nil && baselineFrom != SettingsFromEnvironment && e.String() != baselineConf {
		conf := e.String()
		a.IgnoredEnvConf = &conf
	}
	var best *PolicyResult
	for i := range c.Policies {
		p := &c.Policies[i]
		if p.Verdict != nil && p.Verdict.Fits {
			a.Fitting = append(a.Fitting, p.Name)
		}
		if !isTorch(p.Name) || p.MinCapacity == 0 {
			continue
		}
		if best == nil || p.MinCapacity < best.MinCapacity {
			best = p
		}
	}
	if best != nil {
		a.BestPolicy, a.Best = best.Name, *best.TorchConf
	}
	if c.Capacity > 0 {
		a.decide()
	} else {
		a.recommendWithoutCapacity()
	}
	return a, nil
}

// adviceBaseline is the policy "as it is" is judged by (Advice.Baseline),
// its conf line and where its settings came from (torchBase): a user who
// recorded the snapshot with expandable_segments:True asks whether *that*
// fits, not whether PyTorch's defaults would.
func adviceBaseline(src Source, opts Options) (policy, conf, from string) {
	base, from := torchBase(src, opts)
	// Options the model does not change anything for (Unmodelled) stay in
	// the line the user sees, not in the row the settings are replayed as.
	conf = base.String()
	if base.IsDefault() {
		return defaultsPolicy, conf, from
	}
	modelled := base
	modelled.Unmodelled = nil
	for _, g := range AdviceGrid {
		if s, err := torch.ParseConf(g); err == nil && s.String() == modelled.String() {
			return torchPrefix + g, conf, from
		}
	}
	return Torch, conf, from
}

// decide answers at the capacity. The defaults' verdict comes first. A
// setting is recommended only when the defaults do not fit, or when it
// gains at least ChangeThreshold of margin over them; otherwise the
// defaults already fit. Among the PyTorch settings that fit, the one with
// the most margin (the smallest device) wins; on a tie, the one with fewer
// retries at the capacity, then fewer cudaMalloc calls, then the earlier
// in the grid. Margin, not headroom at the peak, is the measure: a setting
// that keeps releasing its cache (garbage_collection_threshold) shows a
// low peak under the capacity but needs as large a device.
func (a *Advice) decide() {
	c := a.Comparison
	a.ChangeThreshold = ChangeThreshold(c.Capacity)
	var defaults, pick *PolicyResult
	for i := range c.Policies {
		p := &c.Policies[i]
		if p.Name == a.Baseline {
			defaults = p
			a.Defaults = p.Verdict
		}
		if !isTorch(p.Name) || p.Verdict == nil || !p.Verdict.Fits || p.MinDevice == 0 {
			continue
		}
		if pick == nil || cheaperFit(p, pick) {
			pick = p
		}
	}
	defaultsFit := defaults != nil && defaults.Verdict != nil && defaults.Verdict.Fits
	switch {
	case pick == nil && !defaultsFit:
		a.Decision = DecisionNoneFits
		return
	case defaultsFit:
		a.Decision = DecisionDefaultsFit
		if pick != nil && defaults.MinDevice > 0 && pick != defaults && defaults.MinDevice-min(defaults.MinDevice, pick.MinDevice) >= a.ChangeThreshold {
			a.Decision = DecisionWorthAChange
		} else {
			pick = defaults
		}
	default:
		a.Decision = DecisionDefaultsDoNotFit
	}
	a.Recommended, a.RecommendedConf = pick.Name, pick.TorchConf
	if defaultsFit && defaults.MinDevice > 0 && pick.MinDevice > 0 {
		g := int64(defaults.MinDevice) - int64(pick.MinDevice)
		a.Gain = &g
	}
	if m := pick.Verdict.Margin; m != nil && *m < int64(a.ChangeThreshold) {
		a.TightMargin = true
	}
	a.UseLine = a.useLine(pick, pick == defaults)
}

// recommendWithoutCapacity recommends without a capacity, on the smallest
// devices alone: the smallest-device pick when it needs at least a
// change's worth less than the baseline (ChangeThreshold of the baseline's
// smallest device, as though the card were that size), else the baseline.
// Nothing is recommended when the baseline's smallest device is unknown.
func (a *Advice) recommendWithoutCapacity() {
	var base, best *PolicyResult
	for i := range a.Comparison.Policies {
		p := &a.Comparison.Policies[i]
		switch p.Name {
		case a.Baseline:
			base = p
		case a.BestPolicy:
			best = p
		}
	}
	if base == nil || base.MinDevice == 0 || base.TorchConf == nil {
		return
	}
	a.ChangeThreshold = ChangeThreshold(base.MinDevice)
	pick := base
	if best != nil && best.MinDevice > 0 && best.MinDevice < base.MinDevice && base.MinDevice-best.MinDevice >= a.ChangeThreshold {
		pick = best
	}
	g := int64(base.MinDevice) - int64(pick.MinDevice)
	a.Recommended, a.RecommendedConf, a.Gain = pick.Name, pick.TorchConf, &g
	a.UseLine = a.useLine(pick, pick == base)
}

// useLine is the environment line for running with p; kept says p is the
// baseline.
func (a *Advice) useLine(p *PolicyResult, kept bool) string {
	switch {
	case *p.TorchConf == "":
		return "unset PYTORCH_CUDA_ALLOC_CONF (PyTorch's defaults)"
	case kept && a.Baseline != defaultsPolicy:
		return "PYTORCH_CUDA_ALLOC_CONF=" + *p.TorchConf + " (as now: " + a.BaselineFrom + ")"
	}
	return "PYTORCH_CUDA_ALLOC_CONF=" + *p.TorchConf
}

// cheaperFit reports whether p is a better fit than q: a smaller device,
// then fewer retries and fewer cudaMalloc calls at the capacity.
func cheaperFit(p, q *PolicyResult) bool {
	if p.MinDevice != q.MinDevice {
		return p.MinDevice < q.MinDevice
	}
	ps, qs := p.Verdict.SlowPath, q.Verdict.SlowPath
	if ps.Retries() != qs.Retries() {
		return ps.Retries() < qs.Retries()
	}
	return deviceAllocs(ps) < deviceAllocs(qs)
}

// deviceAllocs is a slow path's cudaMalloc count (0 when not measured).
func deviceAllocs(s *SlowPath) uint64 {
	if s == nil || s.DeviceAllocs == nil {
		return 0
	}
	return *s.DeviceAllocs
}

// NoneFits reports whether a capacity was asked about and no PyTorch
// setting of the grid fits it (advise -require-fit).
func (a *Advice) NoneFits() bool { return a.Decision == DecisionNoneFits }

// WriteJSON writes the advice as one JSON object.
func (a *Advice) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(a)
}
