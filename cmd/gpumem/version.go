package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// versionCmd prints what the binary was built from, as the Go toolchain
// recorded it: the module version (a tag, a pseudo-version, or "(devel)"),
// the commit and its time, whether the tree had uncommitted changes, and
// the Go version and platform. It reads only the build info, so a bug
// report can quote it exactly.
func versionCmd(args []string, stdout io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stdout, versionUsage)
		return nil
	}
	if len(args) != 0 {
		return fmt.Errorf("%w: gpumem version takes no arguments", errUsage)
	}
	fmt.Fprintln(stdout, versionLine(debug.ReadBuildInfo()))
	return nil
}

// versionLine formats the build info (ok false: none was recorded, as in a
// binary built without module support).
func versionLine(info *debug.BuildInfo, ok bool) string {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	if !ok {
		return fmt.Sprintf("gpumem (no build information) %s %s", runtime.Version(), platform)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	line := "gpumem " + info.Main.Version
	if rev := settings["vcs.revision"]; rev != "" {
		line += " (commit " + rev[:min(12, len(rev))]
		if t := settings["vcs.time"]; t != "" {
			line += " of " + t
		}
		if settings["vcs.modified"] == "true" {
			line += ", with uncommitted changes"
		}
		line += ")"
	}
	return line + " " + info.GoVersion + " " + platform
}
