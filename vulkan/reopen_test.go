package vulkan

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procState is what a process holds that a leak per open would grow: the
// shared objects mapped (/proc/self/maps), open descriptors, threads and
// resident memory.
type procState struct {
	libs    map[string]bool
	fds     int
	threads int
	rssKiB  int
}

func readProcState(t testing.TB) procState {
	t.Helper()
	libs, err := mappedLibraries()
	if err != nil {
		t.Skipf("no /proc/self/maps here: %v", err)
	}
	s := procState{libs: libs}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd here: %v", err)
	}
	s.fds = len(fds)
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status here: %v", err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		switch k {
		case "Threads":
			s.threads, _ = strconv.Atoi(f[0])
		case "VmRSS":
			s.rssKiB, _ = strconv.Atoi(f[0])
		}
	}
	return s
}

// missing lists what of want is not in have.
func missing(want, have map[string]bool) []string {
	var out []string
	for p := range want {
		if !have[p] {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// TestOpeningAndClosingManyTimesLeavesNothingBehind opens reopenMax
// backends, or as many as it opens in reopenBudget once it opened
// reopenMin: past the ~30 after which an NVIDIA H200 (driver 580.159.04)
// refused every further vkCreateInstance, when each open loaded its driver
// afresh, and within a GPU check's time where an open is slow.
const (
	reopenMin    = 40
	reopenMax    = 100
	reopenBudget = 10 * time.Second
)

// A process opens and closes backends many times (the tests do, a program
// may): each Close destroys the instance its open created, and no open
// leaves anything behind that the next adds to. The driver the loader
// loaded for the first instance stays loaded (libraries mapped while the
// first backend was open are still mapped after its Close): without that
// the loader unloaded the driver at every vkDestroyInstance and loaded it
// again at the next vkCreateInstance, re-running its initialisation per
// open (here: libvulkan_lvp.so loaded once per instance, 121 times), and
// an NVIDIA H200 refused every vkCreateInstance after ~30 opens
// (VK_ERROR_INCOMPATIBLE_DRIVER).
func TestOpeningAndClosingManyTimesLeavesNothingBehind(t *testing.T) {
	created, destroyed := instancesCreated.Load(), instancesDestroyed.Load()
	live := func() int64 {
		return (instancesCreated.Load() - created) - (instancesDestroyed.Load() - destroyed)
	}
	validation := false
	if b, err := NewBackend(Options{Validation: true}); err == nil {
		validation = true
		b.Close()
	}
	before := readProcState(t)
	b, err := NewBackend(Options{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no Vulkan device: %v", err)
	}
	open := readProcState(t)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if n := live(); n != 0 {
		t.Fatalf("%d instance(s) left after Close", n)
	}
	first := readProcState(t)
	var loaded []string
	for p := range open.libs {
		if !before.libs[p] {
			loaded = append(loaded, p)
		}
	}
	if gone := missing(open.libs, first.libs); len(gone) > 0 {
		t.Errorf("Close unloaded %d of the %d libraries the open loaded (the driver is loaded and initialised afresh at every open): %s",
			len(gone), len(loaded), strings.Join(gone, ", "))
	}
	var tenth procState
	start, opens := time.Now(), 1
	for i := 0; opens < reopenMax && (opens < reopenMin || time.Since(start) < reopenBudget); i++ {
		opens++
		// Every other open validated (where the layer is installed), and
		// now and then one that fails after its instance was created
		// (device selection) and a Devices call.
		opts := Options{Validation: validation && i%2 == 1}
		switch i % 10 {
		case 3:
			if _, err := NewBackend(Options{Device: "no such device name"}); err == nil {
				t.Fatal("an open of a device no one has succeeded")
			}
		case 7:
			if _, err := Devices(Options{}); err != nil {
				t.Fatal(err)
			}
		}
		b, err := NewBackend(opts)
		if err != nil {
			t.Fatalf("open %d: %v", opens, err)
		}
		if n := live(); n != 1 {
			t.Fatalf("open %d: %d instances live, want the backend's one", opens, n)
		}
		if err := b.Close(); err != nil {
			t.Fatalf("close %d: %v", opens, err)
		}
		if m := b.ValidationMessages(); len(m) > 0 {
			t.Fatalf("open %d: validation: %v", opens, m)
		}
		if n := live(); n != 0 {
			t.Fatalf("close %d: %d instance(s) left", opens, n)
		}
		if i == 9 {
			tenth = readProcState(t)
		}
	}
	last := readProcState(t)
	t.Logf("%d opens (validation on every other: %v), %d instances created and destroyed; libraries %d before, %d open, %d after the first close, %d after the last; descriptors %d/%d; threads %d/%d; RSS %d KiB after the first close, %d after the 11th, %d after the last",
		opens, validation, instancesCreated.Load()-created, len(before.libs), len(open.libs), len(first.libs), len(last.libs),
		first.fds, last.fds, first.threads, last.threads, first.rssKiB, tenth.rssKiB, last.rssKiB)
	if grown := missing(last.libs, first.libs); len(grown) > 0 {
		t.Errorf("libraries mapped after the last close and not after the first: %s", strings.Join(grown, ", "))
	}
	if gone := missing(first.libs, last.libs); len(gone) > 0 {
		t.Errorf("libraries unmapped since the first close: %s", strings.Join(gone, ", "))
	}
	if last.fds > first.fds+2 {
		t.Errorf("open descriptors grew from %d to %d over %d opens", first.fds, last.fds, opens)
	}
	if last.threads > first.threads+4 {
		t.Errorf("threads grew from %d to %d over %d opens", first.threads, last.threads, opens)
	}
	// Allocators keep some of what was freed; a leak of a driver's state
	// per open (megabytes on a GPU) would pass this bound by far.
	if grew := last.rssKiB - tenth.rssKiB; grew > 48<<10 {
		t.Errorf("resident memory grew by %d KiB over the last %d opens", grew, opens-11)
	}
}
