package hoststorage

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
)

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s + "\n")} }

// The lowest limit on the group's path wins, v1 or v2; "max" and v1's
// "no limit" value are no limit; a path the mount does not show falls back
// to the mount's root files, as inside a container.
func TestCgroupMemoryLimitReadsTheLowestLimitOnThePath(t *testing.T) {
	for _, c := range []struct {
		name   string
		fs     fstest.MapFS
		cgroup string
		want   uint64
		from   string
	}{
		{"v2 own group", fstest.MapFS{
			"sys/fs/cgroup/user.slice/app/memory.max": file("8589934592"),
			"sys/fs/cgroup/user.slice/memory.max":     file("max"),
		}, "0::/user.slice/app\n", 8 << 30, "cgroup v2 memory.max (/sys/fs/cgroup/user.slice/app/memory.max)"},
		{"v2 parent lower", fstest.MapFS{
			"sys/fs/cgroup/a/b/memory.max": file("17179869184"),
			"sys/fs/cgroup/a/memory.max":   file("4294967296"),
		}, "0::/a/b", 4 << 30, "cgroup v2 memory.max (/sys/fs/cgroup/a/memory.max)"},
		{"v1 hidden path, mount root", fstest.MapFS{
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("21474836480"),
		}, "12:cpu,cpuacct:/x\n4:memory:/process_api/abc\n0::/\n", 20 << 30, "cgroup v1 memory.limit_in_bytes (/sys/fs/cgroup/memory/memory.limit_in_bytes)"},
		{"v1 controllers listed together", fstest.MapFS{
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes": file("1073741824"),
		}, "3:memory,hugetlb:/job", 1 << 30, "cgroup v1 memory.limit_in_bytes (/sys/fs/cgroup/memory/job/memory.limit_in_bytes)"},
	} {
		got, ok := cgroupMemoryLimit(c.fs, c.cgroup)
		if !ok || got.Bytes != c.want || got.From != c.from {
			t.Errorf("%s: %+v, %v; want %d from %q", c.name, got, ok, c.want, c.from)
		}
	}
	for name, c := range map[string]struct {
		fs     fstest.MapFS
		cgroup string
	}{
		"v2 max":      {fstest.MapFS{"sys/fs/cgroup/memory.max": file("max")}, "0::/"},
		"v1 no limit": {fstest.MapFS{"sys/fs/cgroup/memory/memory.limit_in_bytes": file("9223372036854771712")}, "4:memory:/"},
		"no files":    {fstest.MapFS{}, "0::/a\n4:memory:/b"},
		"garbage":     {fstest.MapFS{"sys/fs/cgroup/memory.max": file("lots")}, "0::/\nnot a line"},
	} {
		if got, ok := cgroupMemoryLimit(c.fs, c.cgroup); ok {
			t.Errorf("%s: found a limit %+v where none is set", name, got)
		}
	}
}

// On Linux MachineMemory is RAM plus swap, or the process's cgroup limit
// where that is lower, and MachineMemoryLimit says which.
func TestMachineMemoryIsTheLowerOfRAMPlusSwapAndTheCgroupLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the cgroup limit is read on linux only")
	}
	l := MachineMemoryLimit()
	if l.Bytes != MachineMemory() || l.Bytes == 0 {
		t.Fatalf("MachineMemoryLimit %+v, MachineMemory %d", l, MachineMemory())
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip(err)
	}
	if c, ok := cgroupMemoryLimit(os.DirFS("/"), string(cg)); ok && c.Bytes < l.Bytes {
		t.Fatalf("cgroup limit %+v is below MachineMemory's %+v", c, l)
	}
	if l.From != "RAM+swap" && !strings.HasPrefix(l.From, "cgroup") {
		t.Fatalf("From = %q", l.From)
	}
}
