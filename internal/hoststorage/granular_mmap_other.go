//go:build !linux

// Systems other than Linux get no host mapping for granular ranges: a
// GranularHost there reports Granule() == 0 and is a plain Host (design in
// granular_host.go).

package hoststorage

import "os"

// hostMapping is nil: granules are not mapped on this system.
var hostMapping rangeBacking

func osPageSize() uint64 { return uint64(os.Getpagesize()) }
