package trace

import (
	"os/exec"
	"strings"
	"testing"
)

// The trace formats know no device (design §2): no package under trace/
// imports the root package or any package of the device (issue 24 moved
// the comparison, which drives devices, out to compare/ beside replay).
func TestTraceFormatsImportNoDevicePackage(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to list imports")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", "github.com/gpumem/gpumem/internal/analysis/trace/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	device := []string{"github.com/gpumem/gpumem", "github.com/gpumem/gpumem/storage", "github.com/gpumem/gpumem/internal/memory",
		"github.com/gpumem/gpumem/stream", "github.com/gpumem/gpumem/internal/relocation", "github.com/gpumem/gpumem/internal/analysis/replay",
		"github.com/gpumem/gpumem/internal/analysis/compare", "github.com/gpumem/gpumem/cuda", "github.com/gpumem/gpumem/vulkan"}
	for _, dep := range strings.Fields(string(out)) {
		for _, d := range device {
			if dep == d {
				t.Errorf("a trace package depends on %s", dep)
			}
		}
	}
}
