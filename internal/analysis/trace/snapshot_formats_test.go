package trace

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The fixtures of these tests are written by testdata/formats_snapshot.py,
// whose comments say what each one holds.
var formatFixtures = []string{"pytorch20.pickle", "segments-list.pickle", "device1-empty-traces.pickle",
	"marker-device0.pickle", "segments-two-devices.pickle", "three-devices.pickle", "cached-only.pickle"}

// PyTorch 2.0's blocks have no address: each lies at its segment's address
// plus the sizes of the blocks before it, as memory_viz places them; a live
// block's request is its history's newest real_size; an inactive block's
// stale requested_size (16 MiB in a 4 MiB block) is never read.
func TestPyTorch20BlocksLieAfterTheBlocksBeforeThem(t *testing.T) {
	const s0, s1 = 0x7F0000000000, 0x7F0001400000
	s := mustSnapshot(t, readFixture(t, "pytorch20.pickle"), SnapshotOptions{})
	// The trace allocates at s0 + 6 MiB, the third block's derived
	// address: that block is the trace's, not the prelude's. The prelude
	// is the two other live blocks, by their histories' requests.
	if s.Counts.PreludeFromSegments != 2 || s.Counts.PreludeBytes != 1500000+500 {
		t.Fatalf("prelude %d blocks of %d bytes, want 2 of 1500500 (s0's 1500000 and s1's 500)", s.Counts.PreludeFromSegments, s.Counts.PreludeBytes)
	}
	if s.Counts.Allocs != 2 || s.Counts.ImpliedFrees != 0 || s.Counts.Frees != 1 {
		t.Fatalf("counts %+v: want the trace's two allocations at free addresses and its one free", s.Counts)
	}
	if want := uint64(1500000 + 500 + 1*MiB + 6*MiB); s.PeakLive != want {
		t.Fatalf("peak live %d, want %d", s.PeakLive, want)
	}
	wantStart := []StartSegment{{Address: s0, Size: 20 * MiB, Stream: 0}, {Address: s1, Size: 2 * MiB, Stream: 0, Small: true}}
	if !slices.Equal(s.StartSegments, wantStart) {
		t.Fatalf("start segments %+v, want %+v", s.StartSegments, wantStart)
	}
	if s.FinalReserved != 22*MiB || len(s.Devices) != 1 || s.Devices[0].Live != 1500000+6000000+500 {
		t.Fatalf("reserved %d, devices %+v", s.FinalReserved, s.Devices)
	}
}

// Where a 2.0 block cannot be placed, the message says why and names the
// block; an inactive block's requested_size is not even checked.
func TestPyTorch20BlocksThatCannotBePlacedAreNamed(t *testing.T) {
	for name, tc := range map[string]struct{ json, want string }{
		"no segment address": {`{"segments": [{"total_size": 1024, "blocks": [{"state": "active_allocated", "size": 1024}]}]}`,
			"segment 0 block 0 has no address, and segment 0's address None cannot place it"},
		"sizes past the segment": {`{"segments": [{"address": 4096, "total_size": 1024, "blocks": [{"state": "inactive", "size": 1024}, {"state": "active_allocated", "size": 512}]}]}`,
			"segment 0 block 1: the sizes of blocks 0 to 1 add up to more than the segment's total_size 1024"},
		"address past 2^64": {`{"segments": [{"address": 18446744073709551615, "total_size": 1024, "blocks": [{"state": "active_allocated", "size": 512}]}]}`,
			"segment 0: address 0xffffffffffffffff plus total_size 1024 pass 2^64"},
		"a size missing before": {`{"segments": [{"address": 4096, "total_size": 1024, "blocks": [{"state": "inactive"}, {"state": "active_allocated", "size": 512}]}]}`,
			"segment 0 block 0 has neither an address nor a size"},
	} {
		if _, err := ReadSnapshot(strings.NewReader(tc.json), SnapshotOptions{}); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	stale := `{"segments": [{"address": 4096, "total_size": 2048, "blocks": [
		{"state": "inactive", "size": 1024, "requested_size": 9223372036854775807},
		{"state": "active_allocated", "size": 1024, "requested_size": 4096, "history": [{"addr": 5120, "real_size": 1000}]}]}]}`
	s, err := ReadSnapshot(strings.NewReader(stale), SnapshotOptions{})
	if err != nil || len(s.Events) != 1 || s.Events[0].Size != 1000 {
		t.Fatalf("stale inactive request, live request in history: %v, %+v", err, s)
	}
}

// torch.cuda.memory_snapshot()'s list is segments with no trace (memory_viz
// reads it as {'segments': list, 'device_traces': []}), here all on device
// 1; a dict of segments with every trace empty reads the same. Either is
// replayed as what was live at the dump, on the device that holds it.
func TestSegmentsWithoutTraceAreTheLiveBlocksAtTheDump(t *testing.T) {
	const live = 8*MiB + 3*MiB + 1000000
	for _, name := range []string{"segments-list.pickle", "device1-empty-traces.pickle"} {
		s := mustSnapshot(t, readFixture(t, name), SnapshotOptions{})
		if s.Device != 1 || s.Counts.Entries != 0 || s.Counts.PreludeFromSegments != 3 || s.PeakLive != live || s.FinalLive != live {
			t.Errorf("%s: device %d, %d entries, %d prelude, peak live %d: want device 1's 3 live blocks, %d bytes", name, s.Device, s.Counts.Entries, s.Counts.PreludeFromSegments, s.PeakLive, live)
		}
		if s.FirstAlloc != -1 || s.WindowPeakReserved != 22*MiB || s.ReservedAtFirstAlloc != 22*MiB || s.FinalReserved != 22*MiB {
			t.Errorf("%s: window from %d, reserved %d/%d/%d: want the dump's 22 MiB", name, s.FirstAlloc, s.WindowPeakReserved, s.ReservedAtFirstAlloc, s.FinalReserved)
		}
	}
	// The same list as JSON.
	j := `[{"device": 1, "address": 4096, "total_size": 2048, "blocks": [{"address": 4096, "size": 1024, "requested_size": 1000, "state": "active_allocated"}]}]`
	if s, err := ReadSnapshot(strings.NewReader(j), SnapshotOptions{}); err != nil || s.Device != 1 || s.PeakLive != 1000 {
		t.Fatalf("JSON list: %v, %+v", err, s)
	}
	if kind, _, _, err := Sniff(strings.NewReader(j)); err != nil || kind != InputSnapshot {
		t.Fatalf("JSON list sniffed as %v, %v", kind, err)
	}
	// The empty list of a process that allocated nothing is a snapshot
	// too: no device has data.
	s, err := ReadSnapshot(bytes.NewReader(pickleOf(']')), SnapshotOptions{})
	if err != nil || len(s.Events) != 0 || len(s.Devices) != 0 {
		t.Fatalf("empty list: %v, %+v", err, s)
	}
}

// Devices are chosen by their data: segments, or trace entries other than
// snapshot markers. One device with data is read without a choice; several
// are a *SeveralDevicesError for ReadSnapshot (each listed with its live,
// reserved and entries) and one Snapshot each for ReadSnapshotDevices.
func TestDevicesAreChosenByTheirData(t *testing.T) {
	for _, tc := range []struct {
		fixture string
		devices []int // with data
	}{
		{"segments-list.pickle", []int{1}},
		{"device1-empty-traces.pickle", []int{1}},
		{"marker-device0.pickle", []int{1}},
		{"segments-two-devices.pickle", []int{0, 1}},
		{"three-devices.pickle", []int{0, 1, 2}},
		{"pytorch20.pickle", []int{0}},
		{"cached-only.pickle", []int{0}},
	} {
		data := readFixture(t, tc.fixture)
		all, err := ReadSnapshotDevices(bytes.NewReader(data), SnapshotOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.fixture, err)
		}
		var got []int
		for _, s := range all {
			got = append(got, s.Device)
			if len(s.Devices) != len(tc.devices) {
				t.Errorf("%s device %d: Devices %+v", tc.fixture, s.Device, s.Devices)
			}
		}
		if !slices.Equal(got, tc.devices) {
			t.Errorf("%s: ReadSnapshotDevices read devices %v, want %v", tc.fixture, got, tc.devices)
		}
		s, err := ReadSnapshot(bytes.NewReader(data), SnapshotOptions{})
		if len(tc.devices) == 1 {
			if err != nil || s.Device != tc.devices[0] {
				t.Errorf("%s: ReadSnapshot: %v, want device %d without a choice", tc.fixture, err, tc.devices[0])
			}
			continue
		}
		var several *SeveralDevicesError
		if !errors.As(err, &several) || !errors.Is(err, ErrSeveralDevices) || errors.Is(err, ErrSnapshot) || strings.Contains(err.Error(), "bad") {
			t.Errorf("%s: ReadSnapshot: %v, want a SeveralDevicesError that does not call the file bad", tc.fixture, err)
			continue
		}
		for _, d := range several.Devices {
			if !strings.Contains(err.Error(), d.String()) {
				t.Errorf("%s: %q does not list %q", tc.fixture, err, d)
			}
		}
		// Each device chosen reads alone, as ReadSnapshotDevices read it.
		for i, dev := range tc.devices {
			s, err := ReadSnapshot(bytes.NewReader(data), SnapshotOptions{ChooseDevice: true, Device: dev})
			if err != nil || s.Device != dev || !slices.Equal(s.Events, all[i].Events) {
				t.Errorf("%s: device %d chosen: %v", tc.fixture, dev, err)
			}
		}
	}
	// The device of a lone marker has no data: choosing it names the
	// device that has.
	_, err := ReadSnapshot(bytes.NewReader(readFixture(t, "marker-device0.pickle")), SnapshotOptions{ChooseDevice: true, Device: 0})
	var none *NoDeviceDataError
	if !errors.As(err, &none) || none.Device.Markers != 1 || len(none.Devices) != 1 || none.Devices[0].Device != 1 ||
		!strings.Contains(err.Error(), "device 0 has no data in the snapshot (no segments, no trace entries but 1 snapshot marker); data for device 1") {
		t.Fatalf("device 0 chosen: %v", err)
	}
}

// The summary of each device: segments, reserved and live bytes at the
// dump, trace entries with markers apart.
func TestDeviceDataSumsTheDump(t *testing.T) {
	s := mustSnapshot(t, readFixture(t, "marker-device0.pickle"), SnapshotOptions{})
	want := []DeviceData{{Device: 1, Segments: 2, Reserved: 22 * MiB, Live: 8*MiB + 3*MiB + 1000000, Entries: 3}}
	if !slices.Equal(s.Devices, want) {
		t.Fatalf("devices %+v, want %+v", s.Devices, want)
	}
	if got := want[0].String(); got != "device 1: 11.95 MiB live and 22.00 MiB reserved in 2 segments at the dump, 3 trace entries" {
		t.Fatalf("%q", got)
	}
	if got := (DeviceData{Device: 0, Entries: 1, Markers: 2}).String(); got != "device 0: no segments at the dump, 1 trace entry (and 2 snapshot markers)" {
		t.Fatalf("%q", got)
	}
}

// A file that decodes but is no snapshot says what its top level is and
// what was expected, and is not called a bad snapshot.
func TestNotASnapshotSaysWhatWasFoundAndExpected(t *testing.T) {
	for name, tc := range map[string]struct {
		input []byte
		found string
	}{
		"other dict":     {[]byte(`{"x": 1}`), `top level is a dict of 1 key ("x"), without segments or device_traces`},
		"integer":        {pickleOf('K', 7), "top level is 7"},
		"list of ints":   {pickleOf(']', 'K', 7, 'a'), "top level is list of 1 whose first item is 7"},
		"json list":      {[]byte(`[{"a": 1}]`), `top level is list of 1 whose first item is a dict of 1 key ("a") without total_size`},
		"many keys":      {[]byte(`{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6}`), `a dict of 6 keys ("a", "b", "c", "d", "e", …)`},
		"list of others": {pickleOf(']', '}', 0x8c, 1, 'a', 'K', 1, 's', 'a'), `top level is list of 1 whose first item is a dict of 1 key ("a") without total_size, not a segment`},
	} {
		_, err := ReadSnapshot(bytes.NewReader(tc.input), SnapshotOptions{})
		if !errors.Is(err, ErrNotSnapshot) || errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), tc.found) ||
			!strings.Contains(err.Error(), "expected "+snapshotShapes) {
			t.Errorf("%s: %v, want ErrNotSnapshot saying %q and what was expected", name, err, tc.found)
		}
	}
}

// ReadSnapshotDevices reads at most MaxSnapshotDevices devices: past that a
// crafted file would make a conversion per tiny segment.
func TestReadSnapshotDevicesBoundsTheDevices(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"segments": [`)
	for i := range MaxSnapshotDevices + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"device": ` + strconv.Itoa(i) + `, "address": 4096, "total_size": 512, "blocks": []}`)
	}
	b.WriteString(`]}`)
	_, err := ReadSnapshotDevices(strings.NewReader(b.String()), SnapshotOptions{})
	var several *SeveralDevicesError
	if !errors.As(err, &several) || len(several.Devices) != MaxSnapshotDevices+1 || !strings.Contains(err.Error(), "… and 49 more devices") {
		t.Fatalf("%d devices: %v", MaxSnapshotDevices+1, err)
	}
	if s, err := ReadSnapshotDevices(strings.NewReader(b.String()), SnapshotOptions{ChooseDevice: true, Device: 64}); err != nil || len(s) != 1 || s[0].Device != 64 {
		t.Fatalf("device 64 chosen: %v", err)
	}
}

// The shared snapshots of the formats this file reads, each against
// figures CPython's own pickle module gives (../shared/traces/SOURCE.md):
// live bytes summed over the active blocks, with the 2.0 file's blocks
// placed by size and their requests taken from history[0]['real_size'].
func TestSharedSnapshotsOfEveryFormat(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "..", "shared", "traces")
	for _, tc := range []struct {
		name     string
		devices  []int
		peakLive []uint64
	}{
		// sum(b['requested_size'] for s in d for b in s['blocks'] if b['state'].startswith('active'))
		{"diffusion-device1-segments-list.pkl", []int{1}, []uint64{3308174782}},
		// the 785 active blocks' history[0]['real_size'] (placed by size:
		// none at the trace's one free_completed) plus that free's size
		{"opt-1.3b-offloaded-inference-pytorch2.0.pickle", []int{0}, []uint64{5692346376}},
		{"gcn-three-devices-expandable-oom.pickle", []int{0, 1, 2}, nil},
	} {
		data, err := os.ReadFile(filepath.Join(dir, tc.name))
		if err != nil {
			t.Logf("skipping %s: %v", tc.name, err)
			continue
		}
		all, err := ReadSnapshotDevices(bytes.NewReader(data), SnapshotOptions{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, s := range all {
			if i >= len(tc.devices) || s.Device != tc.devices[i] {
				t.Fatalf("%s: read device %d, want devices %v", tc.name, s.Device, tc.devices)
			}
			if tc.peakLive != nil && s.PeakLive != tc.peakLive[i] {
				t.Errorf("%s device %d: peak live %d, CPython's count %d", tc.name, s.Device, s.PeakLive, tc.peakLive[i])
			}
		}
	}
}
