package shadowmodel

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumem/gpumem/internal/vulkantest"
	"github.com/gpumem/gpumem/vulkan"
)

var scriptFlag = flag.String("script", "", "TestReplay: run this script file (as a failing run wrote it) instead of testdata/*.txt")

// testdataWants says what each committed script must make happen, so a
// change of the device that stops it (a relocation that no longer
// happens) shows, instead of leaving a script that checks less than it
// says.
var testdataWants = map[string]func(Totals) bool{
	"relocate-while-streams-run.txt": func(t Totals) bool { return t.Moves > 0 && t.RelocVerifies > 0 },
	"capture.txt":                    func(t Totals) bool { return t.Captures >= 2 && t.Launches >= 4 && t.Fails > 0 && t.Reused > 0 },
	"faults.txt":                     func(t Totals) bool { return t.Faults > 0 && t.Fails > 0 && t.Skips > 0 },
	"vulkan.txt":                     func(t Totals) bool { return t.Captures > 0 && t.Launches > 0 && t.Moves > 0 },
}

// TestReplay runs the scripts in testdata/ (or -script FILE): none may
// diverge, and a committed script must run every operation (none void)
// and make happen what testdataWants says.
func TestReplay(t *testing.T) {
	files := []string{*scriptFlag}
	if *scriptFlag == "" {
		var err error
		if files, err = filepath.Glob("testdata/*.txt"); err != nil || len(files) == 0 {
			t.Fatalf("no testdata/*.txt: %v", err)
		}
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			text, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			s, err := Parse(string(text))
			if err != nil {
				t.Fatal(err)
			}
			res := replay(t, s)
			t.Logf("%s", res.Totals)
			Check(t, s, res, "")
			if *scriptFlag != "" {
				return
			}
			if res.Void != 0 {
				t.Errorf("%d operations void: a committed script's buffers must all exist", res.Void)
			}
			want, ok := testdataWants[filepath.Base(file)]
			switch {
			case !ok:
				t.Errorf("testdataWants says nothing of %s", filepath.Base(file))
			case !want(res.Totals):
				t.Errorf("the script no longer makes happen what it was written for (testdataWants): %s", res.Totals)
			}
		})
	}
}

// replay runs s on the backend its config names: a fresh validated
// Vulkan backend for a vulkan script (skipped where there is none, and
// failed on any validation message).
func replay(t *testing.T, s *Script) Result {
	t.Helper()
	if s.Config.Backend != Vulkan {
		res, err := Run(s, Target{})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	b, err := vulkan.NewBackend(vulkantest.Validated(vulkan.Options{}))
	vulkantest.Need(t, err)
	if s.Config.HostMaps && !b.PagesHostVisible() {
		_ = b.Close()
		t.Skipf("the script maps pages (host-maps); this device's pages are not host-visible")
	}
	res, err := Run(s, VulkanTarget(b))
	if err != nil {
		_ = b.Close()
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("vulkan Backend.Close: %v", err)
	}
	for _, m := range b.ValidationMessages() {
		t.Errorf("validation: %s", strings.TrimSpace(m))
	}
	return res
}
