package compare

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"

	"github.com/gpumem/gpumem/internal/pool"
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

// Advice is Advise's result: the comparison of every grid setting with
// gpumem's adaptive policy, and the setting to use.
type Advice struct {
	Comparison *Comparison `json:"comparison"`
	// Best is the grid setting with the smallest smallest-capacity (the
	// earlier in the grid on a tie), as a conf line ("" = defaults).
	Best       string `json:"best_setting"`
	BestPolicy string `json:"best_policy"`
	// Fitting lists the policies that fit Capacity (when given), and
	// UseLine the environment line for the best of the fitting PyTorch
	// settings ("" when none fits or no capacity was given).
	Fitting []string `json:"fitting,omitempty"`
	UseLine string   `json:"use,omitempty"`
}

// Advise replays the trace under gpumem's adaptive policy and PyTorch's
// model under every AdviceGrid setting, in parallel (one replay and
// capacity search per setting), and picks the PyTorch setting that needs
// the smallest device. opts.Policies is ignored.
func Advise(ctx context.Context, src Source, opts Options) (*Advice, error) {
	policies := []string{Adaptive}
	for _, conf := range AdviceGrid {
		policies = append(policies, torchPrefix+conf)
	}
	results := make([]*Comparison, len(policies))
	errs := make([]error, len(policies))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	var progressMu sync.Mutex
	for i, p := range policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			o := opts
			o.Policies = []string{p}
			if opts.Progress != nil {
				o.Progress = func(policy, step string, done, total int) {
					progressMu.Lock()
					defer progressMu.Unlock()
					opts.Progress(policy, step, done, total)
				}
			}
			results[i], errs[i] = Run(ctx, src, o)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	c := results[0]
	for _, r := range results[1:] {
		c.Policies = append(c.Policies, r.Policies...)
	}
	a := &Advice{Comparison: c}
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
		var fit *PolicyResult
		for i := range c.Policies {
			p := &c.Policies[i]
			if isTorch(p.Name) && p.Verdict != nil && p.Verdict.Fits && p.MinCapacity > 0 && (fit == nil || p.MinCapacity < fit.MinCapacity) {
				fit = p
			}
		}
		if fit != nil {
			a.UseLine = "PYTORCH_CUDA_ALLOC_CONF=" + *fit.TorchConf
			if *fit.TorchConf == "" {
				a.UseLine = "unset PYTORCH_CUDA_ALLOC_CONF (PyTorch's defaults fit)"
			}
		}
	}
	return a, nil
}

// WriteText writes the advice: one row per setting with its peak reserved
// at unlimited capacity and its smallest capacity beside gpumem's, the
// best setting marked, and, given a capacity, which fit and the line to
// use.
func (a *Advice) WriteText(w io.Writer) error {
	c := a.Comparison
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: %d events, peak live %s\n", c.Trace, c.Events, pool.Bytes(c.PeakLive))
	c.writePyTorch(&b)
	b.WriteString("\n")
	t := table{left: 2, groups: []tableGroup{
		{"", []string{"", "setting (PYTORCH_CUDA_ALLOC_CONF)"}},
		{"unlimited capacity", []string{"peak reserved", "÷ live"}},
		{"smallest capacity", []string{"capacity", "÷ live"}},
	}}
	if c.Capacity > 0 {
		t.groups = append(t.groups, tableGroup{"at " + pool.Bytes(c.Capacity).String(), []string{"verdict"}})
	}
	for _, p := range c.Policies {
		mark, name := "", "gpumem "+p.Name
		if p.TorchConf != nil {
			name = *p.TorchConf
			if name == "" {
				name = "(PyTorch's defaults)"
			}
		}
		if p.Name == a.BestPolicy {
			mark = "*"
		}
		row := []string{mark, name, pool.Bytes(p.PeakReserved).String(), fmt.Sprintf("%.3f", p.ReservedOverLive), "-", "-"}
		if p.MinCapacity > 0 {
			row[4], row[5] = pool.Bytes(p.MinCapacity).String(), fmt.Sprintf("%.3f", p.MinCapacityOver)
		}
		if v := p.Verdict; v != nil {
			if v.Fits {
				row = append(row, "fits, "+pool.Bytes(v.Headroom).String()+" headroom")
			} else {
				row = append(row, fmt.Sprintf("out of memory at event %d", v.OutOfMemory.Event))
			}
		}
		t.add(row...)
	}
	t.write(&b)
	if a.BestPolicy != "" {
		best := a.Best
		if best == "" {
			best = "PyTorch's defaults"
		}
		fmt.Fprintf(&b, "* the PyTorch setting that needs the smallest device: %s", best)
		for _, p := range c.Policies {
			if p.Name == Adaptive && p.MinCapacity > 0 {
				for _, q := range c.Policies {
					if q.Name == a.BestPolicy {
						fmt.Fprintf(&b, " (%s; gpumem adaptive needs %s)", pool.Bytes(q.MinCapacity), pool.Bytes(p.MinCapacity))
					}
				}
			}
		}
		b.WriteString("\n")
	}
	if c.Capacity > 0 {
		if a.UseLine != "" {
			fmt.Fprintf(&b, "to fit %s: %s\n", pool.Bytes(c.Capacity), a.UseLine)
		} else {
			fmt.Fprintf(&b, "no PyTorch setting of the grid fits %s\n", pool.Bytes(c.Capacity))
		}
	}
	b.WriteString("garbage_collection_threshold acts only under a capacity (its smallest capacity is the figure to read); settings are modelled from PyTorch's source, the defaults checked against recorded snapshots.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the advice as one JSON object.
func (a *Advice) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(a)
}

// WriteHTML writes the comparison's HTML report with the advice on top.
func (a *Advice) WriteHTML(w io.Writer) error {
	var text strings.Builder
	if err := a.WriteText(&text); err != nil {
		return err
	}
	c := *a.Comparison
	c.preface = text.String()
	return c.WriteHTML(w)
}
