package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/gpumem/gpumem/internal/analysis/compare"
	"github.com/gpumem/gpumem/internal/analysis/trace"
)

// A snapshot with data for several devices (segments, or trace entries
// other than markers: trace.DeviceData) is replayed device by device, and
// each is reported: in text one report per device under a heading, in JSON
// every device's report in a "devices" list (devicesJSON). Nothing is
// replayed silently for one device of several, and nothing asks: -device
// N replays one. A device of several with nothing to replay (cached
// segments only) gets its heading and the reason instead of a report.
// Outputs that hold one device's replay (-html, -snapshot-out) ask for
// -device (checkOneDevice).

// deviceReport is one device's part of a report on several devices.
type deviceReport struct {
	in input
	// write writes the device's report (text or JSON as asked); nil when
	// the device has nothing to replay.
	write func(io.Writer) error
}

// deviceReport's writer, as replay's comparisons and advise's answers
// both write themselves.
type reportWriter interface {
	WriteJSON(w io.Writer) error
	WriteTextWidth(w io.Writer, width int) error
}

// deviceReportsOf pairs each input with its result (nil: nothing to
// replay) written as JSON or as text of the given width.
func deviceReportsOf[R interface {
	comparable
	reportWriter
}](ins []input, results []R, json bool, width int) []deviceReport {
	var none R
	reports := make([]deviceReport, len(ins))
	for i, in := range ins {
		reports[i].in = in
		if r := results[i]; r != none {
			reports[i].write = func(w io.Writer) error {
				if json {
					return r.WriteJSON(w)
				}
				return r.WriteTextWidth(w, width)
			}
		}
	}
	return reports
}

// devicesJSON is the JSON report on a snapshot with data for several
// devices.
type devicesJSON struct {
	Trace   string       `json:"trace"`
	Devices []deviceJSON `json:"devices"`
}

// deviceJSON is one device of devicesJSON: what the snapshot holds for it
// (trace.DeviceData) and its report, that of a snapshot of this device
// alone (absent when there was nothing to replay: NothingToReplay says
// why).
type deviceJSON struct {
	Device          int             `json:"device"`
	Segments        int             `json:"segments"`
	ReservedAtDump  uint64          `json:"reserved_at_dump_bytes"`
	LiveAtDump      uint64          `json:"live_at_dump_bytes"`
	TraceEntries    int             `json:"trace_entries"`
	SnapshotMarkers int             `json:"snapshot_markers"`
	NothingToReplay string          `json:"nothing_to_replay,omitempty"`
	Report          json.RawMessage `json:"report,omitempty"`
}

// deviceData is the DeviceData of the input's own device.
func (in input) deviceData() trace.DeviceData {
	for _, d := range in.snap.Devices {
		if d.Device == in.snap.Device {
			return d
		}
	}
	return trace.DeviceData{Device: in.snap.Device}
}

// several reports whether ins are several devices of one snapshot.
func several(ins []input) bool { return len(ins) > 1 }

// checkOneDevice refuses an output that holds one device's replay (flag
// set to a FILE) for a snapshot read for several devices: the user
// chooses one with -device.
func checkOneDevice(flagName, value, path string, ins []input) error {
	if value == "" || !several(ins) {
		return nil
	}
	devs := make([]string, len(ins))
	for i, in := range ins {
		devs[i] = fmt.Sprint(in.snap.Device)
	}
	return fmt.Errorf("%w: %s writes one device's replay, and %s holds data for devices %s: choose one with -device N", errUsage, flagName, inputWhere(path), strings.Join(devs, ", "))
}

// inputWhere names FILE in a message.
func inputWhere(path string) string {
	if path == "-" {
		return stdinName
	}
	return path
}

// writeDeviceReports writes the reports on several devices of the snapshot
// at path: as JSON (devicesJSON) when asJSON, else in text, each under a
// heading, the lines of its own wrapped at width columns (0: none) as the
// reports wrap theirs.
func writeDeviceReports(w io.Writer, path string, asJSON bool, width int, reports []deviceReport) error {
	if asJSON {
		out := devicesJSON{Trace: inputName(path)}
		for _, r := range reports {
			d := r.in.deviceData()
			dj := deviceJSON{Device: d.Device, Segments: d.Segments, ReservedAtDump: d.Reserved, LiveAtDump: d.Live,
				TraceEntries: d.Entries, SnapshotMarkers: d.Markers, NothingToReplay: r.in.nothing}
			if r.write != nil {
				var b bytes.Buffer
				if err := r.write(&b); err != nil {
					return err
				}
				dj.Report = b.Bytes()
			}
			out.Devices = append(out.Devices, dj)
		}
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	devs := make([]string, len(reports))
	for i, r := range reports {
		devs[i] = fmt.Sprint(r.in.snap.Device)
	}
	if _, err := io.WriteString(w, wrapWords(fmt.Sprintf("%s holds data for %d devices (%s): each is replayed on its own, one report per device (-device N replays one)",
		inputName(path), len(reports), strings.Join(devs, ", ")), width)); err != nil {
		return err
	}
	for _, r := range reports {
		if _, err := io.WriteString(w, "\n"+wrapWords(fmt.Sprintf("=== %s ===", r.in.deviceData()), width)); err != nil {
			return err
		}
		if r.write == nil {
			if _, err := io.WriteString(w, wrapWords(fmt.Sprintf("device %d: %s", r.in.snap.Device, r.in.nothing), width)); err != nil {
				return err
			}
			continue
		}
		if err := r.write(w); err != nil {
			return err
		}
	}
	return nil
}

// wrapWords is line s and a newline, cut at spaces into lines of at most
// width columns (0: one line), the continuations indented by two.
func wrapWords(s string, width int) string {
	if width <= 0 || utf8.RuneCountInString(s) <= width {
		return s + "\n"
	}
	return compare.Wrap(s, width)
}

// inputName names FILE as its reports do: its base name, or standard
// input.
func inputName(path string) string {
	if path == "-" {
		return stdinName
	}
	return filepath.Base(path)
}
