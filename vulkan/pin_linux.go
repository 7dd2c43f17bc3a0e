//go:build linux

package vulkan

import (
	"bufio"
	"os"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"
)

// glibc's and musl's dlopen flags that purego does not name.
const (
	rtldNoload   = 0x4
	rtldNodelete = 0x1000
)

// mappedLibraries returns the path of every shared object mapped in the
// process (/proc/self/maps: file mappings whose name has ".so").
func mappedLibraries() (map[string]bool, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	libs := make(map[string]bool)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.SplitN(sc.Text(), " ", 6)
		if len(fields) < 6 {
			continue
		}
		p := strings.TrimSpace(fields[5])
		if strings.HasPrefix(p, "/") && strings.Contains(p, ".so") && !strings.HasSuffix(p, " (deleted)") {
			libs[p] = true
		}
	}
	return libs, sc.Err()
}

// keepLoaded makes the already loaded shared object at path never unloaded
// (dlopen with RTLD_NOLOAD, which loads nothing new, and RTLD_NODELETE).
// It reports whether path was a loaded shared object.
func keepLoaded(path string) bool {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return false
	}
	runtime.LockOSThread() // dlerror is per thread (package internal/dl)
	defer runtime.UnlockOSThread()
	h, err := purego.Dlopen(path, purego.RTLD_LAZY|rtldNoload|rtldNodelete)
	return err == nil && h != 0
}
