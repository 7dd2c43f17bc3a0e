package hoststorage

import (
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// cgroupMemoryLimit finds the lowest memory limit of the control groups a
// process is in, given the text of its /proc/self/cgroup and the file
// system those paths are under (paths in root are relative: "sys/fs/...").
// It reads cgroup v2 (the "0::PATH" line; memory.max, "max" meaning none)
// and v1 (the line whose controllers include "memory";
// memory.limit_in_bytes, where a huge value near 2^63 means none), on the
// group and each group above it, since a parent's limit binds its children.
// Inside a container the group's path is often not visible under the
// mount: then the mount's own root files are the group's. ok is false when
// no limit is set.
func cgroupMemoryLimit(root fs.FS, procCgroup string) (MachineLimit, bool) {
	best := MachineLimit{}
	found := false
	consider := func(file string, from string) {
		data, err := fs.ReadFile(root, file)
		if err != nil {
			return
		}
		v := strings.TrimSpace(string(data))
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 || n >= 1<<62 { // "max", or v1's "no limit" (2^63 rounded down to a page)
			return
		}
		if !found || n < best.Bytes {
			best, found = MachineLimit{Bytes: n, From: from + " (/" + file + ")"}, true
		}
	}
	for _, line := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var mount, file, from string
		switch {
		case parts[0] == "0" && parts[1] == "":
			mount, file, from = "sys/fs/cgroup", "memory.max", "cgroup v2 memory.max"
		case hasController(parts[1], "memory"):
			mount, file, from = "sys/fs/cgroup/memory", "memory.limit_in_bytes", "cgroup v1 memory.limit_in_bytes"
		default:
			continue
		}
		for dir := path.Clean("/" + parts[2]); ; dir = path.Dir(dir) {
			consider(path.Join(mount, dir, file), from)
			if dir == "/" {
				break
			}
		}
	}
	return best, found
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
