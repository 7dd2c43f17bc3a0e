// Package units prints byte counts the one way every report of the module
// does (the device's Report, the replay and advise tables, the CLI's
// messages): a binary unit and two decimals, so a figure in one output
// matches the same figure in another, character for character, and the
// docs' examples stay true (TestDocsShowWhatTheCommandsPrint).
//
// # Owns
//
// [Bytes].
//
// # Does not know
//
// Pools, devices or traces: it formats numbers.
package units

import "fmt"

// Bytes formats a byte count with a binary unit: "512 B", "1.50 KiB", up
// to EiB.
type Bytes uint64

func (b Bytes) String() string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", uint64(b))
	}
	div, exp := uint64(unit), 0
	for n := uint64(b) / unit; n >= unit && exp < 5; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
