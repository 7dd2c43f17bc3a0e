package gpumem

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The module is two products: the library (a device's memory: storage,
// identity, pools, per-stream memory, queues, the device, the backends)
// and the snapshot tool (trace formats, the model of PyTorch, replay,
// compare and advise, the CLI). The library never imports the tool, and
// inside the library a package imports only packages below it: the table
// is the order, lowest first. A package missing from the table fails the
// test, so a new one is placed on purpose.
var libraryLayers = [][]string{
	{"storage", "stream", "history", "internal/dl", "internal/fakecuda", "internal/units"},
	{"internal/handle", "cuda/internal/driver", "vulkan/internal/vk", "internal/hoststorage", "internal/hostqueue", "internal/capture"},
	{"internal/relocation"},
	{"internal/pool"},
	{"internal/memory"},
	{"."}, // the device: package gpumem
	{"internal/backendkit"},
	{"cuda", "vulkan", "internal/backendtest"},
	{"internal/vulkantest", "internal/shadowmodel"}, // test support: imported by tests only
}

// toolPackages study workloads; they may import the library, never the
// reverse. The users of both (the CLI, examples, the GPU kit's programs)
// are listed as neither.
var toolPackages = []string{"internal/analysis/trace", "internal/analysis/trace/torch", "internal/analysis/replay", "internal/analysis/compare"}

var usersOfBoth = []string{"cmd/gpumem", "examples/basic", "examples/quickstart", "examples/cuda", "examples/vulkan", "scripts/gpukit/oomcheck"}

const modulePath = "github.com/gpumem/gpumem"

// moduleImports returns each package directory of the module (relative,
// "." for the root) with the module packages its non-test files import.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string]map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		if out[dir] == nil {
			out[dir] = map[string]bool{}
		}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			switch {
			case p == modulePath:
				out[dir]["."] = true
			case strings.HasPrefix(p, modulePath+"/"):
				out[dir][strings.TrimPrefix(p, modulePath+"/")] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	res := map[string][]string{}
	for dir, imps := range out {
		list := []string{}
		for p := range imps {
			list = append(list, p)
		}
		sort.Strings(list)
		res[dir] = list
	}
	return res
}

func TestLibraryImportsOnlyLowerPackagesAndNeverTheTool(t *testing.T) {
	level := map[string]int{}
	for l, pkgs := range libraryLayers {
		for _, p := range pkgs {
			level[p] = l
		}
	}
	tool := map[string]bool{}
	for _, p := range toolPackages {
		tool[p] = true
	}
	user := map[string]bool{}
	for _, p := range usersOfBoth {
		user[p] = true
	}
	for p := range tool {
		if !strings.HasPrefix(p, "internal/analysis/") {
			t.Errorf("tool package %s lives outside internal/analysis: the tool's interface is its command line and JSON, not a Go API (surface_test.go)", p)
		}
	}
	imports := moduleImports(t)
	if len(imports) < len(level) {
		t.Fatalf("found %d packages, fewer than the %d the table places: run from the module root", len(imports), len(level))
	}
	for dir, imps := range imports {
		l, lib := level[dir]
		if !lib && !tool[dir] && !user[dir] {
			t.Errorf("package %s is in no layer: place it in libraryLayers, toolPackages or usersOfBoth (layering_test.go)", dir)
			continue
		}
		if !lib {
			continue
		}
		for _, imp := range imps {
			if tool[imp] || user[imp] {
				t.Errorf("library package %s imports %s, a package of the snapshot tool (or a user of both)", dir, imp)
				continue
			}
			il, ok := level[imp]
			if !ok {
				t.Errorf("library package %s imports %s, which is in no layer", dir, imp)
			} else if il >= l {
				t.Errorf("library package %s (layer %d) imports %s (layer %d): a package imports only packages below its own layer", dir, l, imp, il)
			}
		}
	}
}
