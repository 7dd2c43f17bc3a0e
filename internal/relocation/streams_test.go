package relocation

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// scriptedStreams answers each query from its fields and logs every call, so
// a test states the exact sequence a provided function must produce.
type scriptedStreams struct {
	recording         bool
	hasOutdated       bool
	need              Need
	deviceHasOutdated bool
	canCompact        bool
	finishErr         error

	log []string
}

func (s *scriptedStreams) Recording() bool {
	s.log = append(s.log, "Recording")
	return s.recording
}

func (s *scriptedStreams) HasOutdated() bool {
	s.log = append(s.log, "HasOutdated")
	return s.hasOutdated
}

func (s *scriptedStreams) RelocationNeed() Need {
	s.log = append(s.log, "RelocationNeed")
	return s.need
}

func (s *scriptedStreams) Finish() error {
	s.log = append(s.log, "Finish")
	return s.finishErr
}

func (s *scriptedStreams) RelocateMemory(r Reason) {
	s.log = append(s.log, fmt.Sprintf("RelocateMemory(%v)", r))
}

func (s *scriptedStreams) DeviceHasOutdated() bool {
	s.log = append(s.log, "DeviceHasOutdated")
	return s.deviceHasOutdated
}

func (s *scriptedStreams) RelocateDeviceMemory(r Reason) {
	s.log = append(s.log, fmt.Sprintf("RelocateDeviceMemory(%v)", r))
}

func (s *scriptedStreams) CleanupMemory() { s.log = append(s.log, "CleanupMemory") }

func (s *scriptedStreams) CanCompact() bool {
	s.log = append(s.log, "CanCompact")
	return s.canCompact
}

func (s *scriptedStreams) CompactMemory() { s.log = append(s.log, "CompactMemory") }

var _ Streams = (*scriptedStreams)(nil)

const mib = 1 << 20

var errFinish = errors.New("finish refused")

func TestProvidedStepsRunInSpecOrderOnEveryBranch(t *testing.T) {
	cases := []struct {
		name    string
		streams scriptedStreams
		run     func(s Streams) error
		wantErr error
		want    []string
	}{
		// Relocate (§9.2): recording and nothing-outdated refuse before Finish.
		{
			name:    "Relocate while recording stops after Recording",
			streams: scriptedStreams{recording: true, hasOutdated: true},
			run:     func(s Streams) error { return Relocate(s, Capture) },
			want:    []string{"Recording"},
		},
		{
			name:    "Relocate with nothing outdated never waits",
			streams: scriptedStreams{},
			run:     func(s Streams) error { return Relocate(s, ArenaFull) },
			want:    []string{"Recording", "HasOutdated"},
		},
		{
			name:    "Relocate with outdated pages finishes then relocates for its reason",
			streams: scriptedStreams{hasOutdated: true},
			run:     func(s Streams) error { return Relocate(s, ArenaFull) },
			want:    []string{"Recording", "HasOutdated", "Finish", "Recording", "HasOutdated", "RelocateMemory(ArenaFull)"},
		},
		{
			name:    "Relocate ignores the device-wide checks and the need",
			streams: scriptedStreams{hasOutdated: true, deviceHasOutdated: false, need: Need{Kind: NeedNothing}},
			run:     func(s Streams) error { return Relocate(s, MemoryPressure) },
			want:    []string{"Recording", "HasOutdated", "Finish", "Recording", "HasOutdated", "RelocateMemory(MemoryPressure)"},
		},
		// RelocateDevice mirrors Relocate with device-wide checks.
		{
			name:    "RelocateDevice while recording stops after Recording",
			streams: scriptedStreams{recording: true, deviceHasOutdated: true},
			run:     func(s Streams) error { return RelocateDevice(s, Capture) },
			want:    []string{"Recording"},
		},
		{
			name:    "RelocateDevice with nothing outdated anywhere never waits",
			streams: scriptedStreams{hasOutdated: true},
			run:     func(s Streams) error { return RelocateDevice(s, Capture) },
			want:    []string{"Recording", "DeviceHasOutdated"},
		},
		{
			name:    "RelocateDevice with outdated pages anywhere finishes then relocates every memory",
			streams: scriptedStreams{deviceHasOutdated: true},
			run:     func(s Streams) error { return RelocateDevice(s, Capture) },
			want:    []string{"Recording", "DeviceHasOutdated", "Finish", "Recording", "DeviceHasOutdated", "RelocateDeviceMemory(Capture)"},
		},
		// RelocateWhenWanted consults the need first, then recording.
		{
			name:    "RelocateWhenWanted with no need asks nothing else",
			streams: scriptedStreams{recording: true, hasOutdated: true, need: Need{Kind: NeedNothing}},
			run:     func(s Streams) error { return RelocateWhenWanted(s) },
			want:    []string{"RelocationNeed"},
		},
		{
			name:    "RelocateWhenWanted while recording stops after Recording",
			streams: scriptedStreams{recording: true, need: Need{Kind: NeedArenaFull}},
			run:     func(s Streams) error { return RelocateWhenWanted(s) },
			want:    []string{"RelocationNeed", "Recording"},
		},
		{
			name:    "RelocateWhenWanted for a full arena relocates for ArenaFull",
			streams: scriptedStreams{need: Need{Kind: NeedArenaFull}},
			run:     func(s Streams) error { return RelocateWhenWanted(s) },
			want:    []string{"RelocationNeed", "Recording", "Finish", "RelocationNeed", "Recording", "RelocateMemory(ArenaFull)"},
		},
		// A failed Finish abandons the call before anything moves.
		{
			name:    "Reclaim whose Finish fails returns its error and cleans nothing",
			streams: scriptedStreams{hasOutdated: true, finishErr: errFinish},
			run:     Reclaim,
			wantErr: errFinish,
			want:    []string{"Recording", "Recording", "HasOutdated", "Finish"},
		},
		{
			name:    "RelocateWhenWanted whose Finish fails moves nothing",
			streams: scriptedStreams{need: Need{Kind: NeedArenaFull}, finishErr: errFinish},
			run:     func(s Streams) error { return RelocateWhenWanted(s) },
			wantErr: errFinish,
			want:    []string{"RelocationNeed", "Recording", "Finish"},
		},
		{
			name:    "RelocateDevice whose Finish fails moves nothing",
			streams: scriptedStreams{deviceHasOutdated: true, finishErr: errFinish},
			run:     func(s Streams) error { return RelocateDevice(s, Capture) },
			wantErr: errFinish,
			want:    []string{"Recording", "DeviceHasOutdated", "Finish"},
		},
		// RefuseWhileRecording and Reclaim.
		{
			name:    "RefuseWhileRecording refuses a recording device after one Recording",
			streams: scriptedStreams{recording: true},
			run:     RefuseWhileRecording,
			wantErr: ErrRecording,
			want:    []string{"Recording"},
		},
		{
			name:    "RefuseWhileRecording lets an idle device through",
			streams: scriptedStreams{hasOutdated: true},
			run:     RefuseWhileRecording,
			want:    []string{"Recording"},
		},
		{
			name:    "Reclaim while recording refuses after one Recording",
			streams: scriptedStreams{recording: true, hasOutdated: true},
			run:     Reclaim,
			wantErr: ErrRecording,
			want:    []string{"Recording"},
		},
		{
			name:    "Reclaim relocates survivors for Explicit before cleaning up",
			streams: scriptedStreams{hasOutdated: true},
			run:     Reclaim,
			want:    []string{"Recording", "Recording", "HasOutdated", "Finish", "Recording", "HasOutdated", "RelocateMemory(Explicit)", "CleanupMemory"},
		},
		{
			name:    "ReclaimFor relocates survivors for its reason before cleaning up",
			streams: scriptedStreams{hasOutdated: true},
			run:     func(s Streams) error { return ReclaimFor(s, MemoryPressure) },
			want:    []string{"Recording", "Recording", "HasOutdated", "Finish", "Recording", "HasOutdated", "RelocateMemory(MemoryPressure)", "CleanupMemory"},
		},
		{
			name:    "ReclaimFor while recording refuses after one Recording",
			streams: scriptedStreams{recording: true, hasOutdated: true},
			run:     func(s Streams) error { return ReclaimFor(s, MemoryPressure) },
			wantErr: ErrRecording,
			want:    []string{"Recording"},
		},
		{
			name:    "ReclaimFor through streams that report nothing outdated cleans up without waiting or moving",
			streams: scriptedStreams{},
			run:     func(s Streams) error { return ReclaimFor(s, MemoryPressure) },
			want:    []string{"Recording", "Recording", "HasOutdated", "CleanupMemory"},
		},
		// CompactPages and ReclaimCompacting: CanCompact, never HasOutdated.
		{
			name:    "CompactPages while recording stops after Recording",
			streams: scriptedStreams{recording: true, canCompact: true},
			run:     CompactPages,
			want:    []string{"Recording"},
		},
		{
			name:    "CompactPages with nothing to empty never waits",
			streams: scriptedStreams{hasOutdated: true},
			run:     CompactPages,
			want:    []string{"Recording", "CanCompact"},
		},
		{
			name:    "CompactPages with nothing outdated still finishes then compacts",
			streams: scriptedStreams{canCompact: true},
			run:     CompactPages,
			want:    []string{"Recording", "CanCompact", "Finish", "Recording", "CanCompact", "CompactMemory"},
		},
		{
			name:    "CompactPages whose Finish fails moves nothing",
			streams: scriptedStreams{canCompact: true, finishErr: errFinish},
			run:     CompactPages,
			wantErr: errFinish,
			want:    []string{"Recording", "CanCompact", "Finish"},
		},
		{
			name:    "ReclaimCompacting compacts before cleaning up",
			streams: scriptedStreams{canCompact: true},
			run:     ReclaimCompacting,
			want:    []string{"Recording", "Recording", "CanCompact", "Finish", "Recording", "CanCompact", "CompactMemory", "CleanupMemory"},
		},
		{
			name:    "ReclaimCompacting while recording refuses after one Recording",
			streams: scriptedStreams{recording: true, canCompact: true},
			run:     ReclaimCompacting,
			wantErr: ErrRecording,
			want:    []string{"Recording"},
		},
		{
			name:    "ReclaimCompacting with nothing to empty cleans up without waiting",
			streams: scriptedStreams{},
			run:     ReclaimCompacting,
			want:    []string{"Recording", "Recording", "CanCompact", "CleanupMemory"},
		},
		{
			name:    "Reclaim with nothing outdated cleans up without waiting",
			streams: scriptedStreams{},
			run:     Reclaim,
			want:    []string{"Recording", "Recording", "HasOutdated", "CleanupMemory"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.streams
			err := tc.run(&s)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("error = %v, want %v", err, tc.wantErr)
			}
			if !slices.Equal(s.log, tc.want) {
				t.Fatalf("calls\n got %q\nwant %q", s.log, tc.want)
			}
		})
	}
}

func TestErrRecordingExplainsWhyTheCallWasRefused(t *testing.T) {
	msg := ErrRecording.Error()
	for _, part := range []string{"relocation: ", "records a graph", "keep their addresses until it seals", "nothing may wait on the device"} {
		if !strings.Contains(msg, part) {
			t.Errorf("ErrRecording = %q, want it to mention %q", msg, part)
		}
	}
}
