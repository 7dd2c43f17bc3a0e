package compare

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpumem/gpumem/internal/analysis/trace/torch"
)

// The PyTorch policies: the model of PyTorch's caching allocator under
// some settings. "torch" runs the base settings (Options.TorchSettings,
// else the snapshot's recorded ones, else PyTorch's defaults);
// "torch-expandable" the base with expandable_segments:True; "torch:CONF"
// exactly the settings of CONF in PYTORCH_CUDA_ALLOC_CONF syntax
// ("torch:defaults" for PyTorch's defaults).
const (
	TorchExpandable = "torch-expandable"
	torchPrefix     = "torch:"
	torchDefaults   = "defaults"
)

// isTorch reports whether a policy is one of the PyTorch policies.
func isTorch(name string) bool {
	return name == Torch || name == TorchExpandable || strings.HasPrefix(name, torchPrefix)
}

// torchSettings are the settings a PyTorch policy runs with, given the
// base settings.
func torchSettings(name string, base torch.Settings) (torch.Settings, error) {
	switch {
	case name == Torch:
		return base, nil
	case name == TorchExpandable:
		base.ExpandableSegments = true
		return base, nil
	case name == torchPrefix+torchDefaults:
		return torch.Settings{}, nil
	}
	conf := strings.TrimPrefix(name, torchPrefix)
	if strings.TrimSpace(conf) == "" {
		// ParseConf takes "" as the defaults (an unset environment
		// variable); a policy written "torch:" more likely lost its
		// setting, so it is refused rather than silently the defaults.
		return torch.Settings{}, fmt.Errorf("%w %q: empty setting: write torch:CONF with CONF in PYTORCH_CUDA_ALLOC_CONF syntax, or torch:defaults for PyTorch's defaults", ErrUnknownPolicy, name)
	}
	s, err := torch.ParseConf(conf)
	if err != nil {
		// The policy is known; its setting is not: the error is the
		// setting's (a *torch.ConfError), with the policy named.
		return torch.Settings{}, fmt.Errorf("policy %q: %w", name, err)
	}
	return s, nil
}

// checkPolicy refuses a policy name Run does not know.
func checkPolicy(name string) error {
	if strings.HasPrefix(name, torchPrefix) {
		_, err := torchSettings(name, torch.Settings{})
		return err
	}
	if !slices.Contains(Policies(), name) {
		return fmt.Errorf("%w %q: want one of %s, or torch:CONF with CONF in PYTORCH_CUDA_ALLOC_CONF syntax", ErrUnknownPolicy, name, strings.Join(Policies(), ", "))
	}
	return nil
}

// ParsePolicies splits a comma-separated list of policies, keeping
// together the comma-separated options of a torch:CONF policy
// ("adaptive,torch:expandable_segments:True,max_split_size_mb:128" is two
// policies): a part that holds a colon and does not start a torch:
// policy continues the one before it.
func ParsePolicies(list string) []string {
	var out []string
	for _, part := range strings.Split(list, ",") {
		part = strings.TrimSpace(part)
		if n := len(out); n > 0 && strings.HasPrefix(out[n-1], torchPrefix) && strings.Contains(part, ":") && !strings.HasPrefix(part, torchPrefix) {
			out[n-1] += "," + part
			continue
		}
		out = append(out, part)
	}
	return out
}
