package gpumem

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumem/gpumem/storage"
)

// deadlockTimeout is how long a call may take before a test calls it a
// deadlock: generous, it only turns a hang into a failure.
const deadlockTimeout = 30 * time.Second

// within runs fn on its own goroutine and fails the test if it has not
// returned after deadlockTimeout.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(deadlockTimeout):
		t.Fatalf("%s did not return (deadlock)", what)
	}
}

// backends are the host backend (worker queues) and Sim (inline queues).
var settleBackends = []struct {
	name string
	opts []Option
}{{"host", nil}, {"sim", []Option{WithSim()}}}

// An op may allocate, free, enqueue and read stats while Close drains its
// queue (defect §7): Close waits for the queues without the device lock.
func TestOpCallingTheDeviceDuringClose(t *testing.T) {
	d, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	s := d.DefaultStream()
	s2, _ := d.NewStream()
	entered, release := make(chan struct{}), make(chan struct{})
	var opErr error
	_ = s.Enqueue("scratch", nil, func([]storage.Resource) error {
		close(entered)
		<-release
		b, err := s2.Alloc(bg, 100) // a kernel allocating scratch memory
		if err == nil {
			err = b.Free()
		}
		opErr = err
		return nil
	})
	<-entered
	go func() { time.Sleep(20 * time.Millisecond); close(release) }()
	within(t, "Device.Close with an op that calls Stream.Alloc", func() { _ = d.Close() })
	if opErr != nil && !errors.Is(opErr, ErrClosed) {
		t.Fatalf("the op's Alloc during Close = %v, want nil or ErrClosed", opErr)
	}
}

// A relocating Cleanup waits for a busy op that allocates on another
// stream, which has outdated pages itself (defect §7).
func TestOpAllocatingDuringARelocatingCleanup(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	s2, _ := d.NewStream()
	keep := mustAlloc(t, s2, 4*mib+3)
	mustWrite(t, keep, pattern(4*mib+3, 7))
	big := mustAlloc(t, s2, 7*mib) // grows: keep sits on an outdated page
	mustFree(t, big)
	entered, release := make(chan struct{}), make(chan struct{})
	var opErr error
	_ = s.Enqueue("scratch", nil, func([]storage.Resource) error {
		close(entered)
		<-release
		b, err := s2.Alloc(bg, 100)
		if err == nil {
			err = b.Free()
		}
		opErr = err
		return nil
	})
	<-entered
	go func() { time.Sleep(20 * time.Millisecond); close(release) }()
	within(t, "a relocating Device.Cleanup with an op that allocates", func() {
		if err := d.Cleanup(bg); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
	})
	if opErr != nil {
		t.Fatalf("the op's Alloc = %v", opErr)
	}
	wantBytes(t, keep, pattern(4*mib+3, 7))
}

// What an op may call returns at once on every backend; on Sim the op runs
// after Enqueue released the device lock (defect §7).
func TestOpCallingTheDeviceFromInsideEnqueue(t *testing.T) {
	for _, be := range settleBackends {
		t.Run(be.name, func(t *testing.T) {
			d := openHost(t, be.opts...)
			s := d.DefaultStream()
			other, _ := d.NewStream()
			var errs []error
			ran := make(chan struct{})
			within(t, "Enqueue of an op that calls the device", func() {
				err := s.Enqueue("calls", nil, func([]storage.Resource) error {
					defer close(ran)
					_ = d.Stats()
					_ = d.Report()
					b, err := other.Alloc(bg, 1000)
					errs = append(errs, err)
					if err == nil {
						c := b.Clone()
						errs = append(errs, other.Enqueue("inner", []Use{{Buffer: b, Access: Write}}, func([]storage.Resource) error { return nil }))
						errs = append(errs, b.Free(), c.Free())
					}
					own, err := s.Alloc(bg, 64)
					errs = append(errs, err)
					if err == nil {
						errs = append(errs, own.Write(bg, []byte{1}), own.Free())
					}
					return nil
				})
				if err != nil {
					t.Errorf("Enqueue: %v", err)
				}
				<-ran
				if err := other.Synchronize(bg); err != nil {
					t.Errorf("Synchronize: %v", err)
				}
			})
			for i, err := range errs {
				if err != nil {
					t.Errorf("call %d from inside the op: %v", i, err)
				}
			}
		})
	}
}

// Calls that wait for the streams are refused from inside an op with
// ErrCalledFromOp, at once, instead of waiting for the op itself.
func TestWaitingCallsFromInsideAnOpAreRefused(t *testing.T) {
	for _, be := range settleBackends {
		t.Run(be.name, func(t *testing.T) {
			d := openHost(t, be.opts...)
			s := d.DefaultStream()
			other, _ := d.NewStream()
			b := mustAlloc(t, s, 64)
			mustWrite(t, b, pattern(64, 1))
			calls := map[string]func() error{
				"Synchronize":  func() error { return s.Synchronize(bg) },
				"Read":         func() error { _, err := b.Read(bg); return err },
				"Map":          func() error { m, err := b.Map(bg); m.Release(); return err },
				"Device.Close": d.Close,
				"Defragment":   func() error { _, err := d.Defragment(bg, DefragOptions{}); return err },
			}
			if be.name == "sim" { // Sim holds no host bytes to read or map
				delete(calls, "Read")
				delete(calls, "Map")
			}
			for name, call := range calls {
				var got error
				within(t, name+" from inside an op", func() {
					err := s.Enqueue("waits", []Use{{Buffer: b, Access: ReadWrite}}, func([]storage.Resource) error {
						_ = s.Enqueue("later", nil, func([]storage.Resource) error { return nil }) // queued behind this op
						got = call()
						return nil
					})
					if err != nil {
						t.Errorf("Enqueue: %v", err)
					}
					if err := other.Synchronize(bg); err != nil {
						t.Errorf("Synchronize: %v", err)
					}
					if err := s.Synchronize(bg); err != nil {
						t.Errorf("Synchronize: %v", err)
					}
				})
				if !errors.Is(got, ErrCalledFromOp) {
					t.Errorf("%s from inside an op = %v, want ErrCalledFromOp", name, got)
				}
			}
		})
	}
}

// An op's relocating Cleanup or capture is refused too; its Alloc under
// pressure allocates without relocating.
func TestRelocationFromInsideAnOpIsRefused(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	keep := mustAlloc(t, s, 4*mib+3)
	big := mustAlloc(t, s, 7*mib) // keep sits on an outdated page
	mustFree(t, big)
	var cleanupErr, prepareErr error
	within(t, "Cleanup from inside an op", func() {
		_ = s.Enqueue("cleans", nil, func([]storage.Resource) error {
			_ = s.Enqueue("later", nil, func([]storage.Resource) error { return nil })
			cleanupErr = s.Cleanup(bg)
			_, prepareErr = s.PrepareCapture()
			return nil
		})
		_ = s.Synchronize(bg)
	})
	if !errors.Is(cleanupErr, ErrCalledFromOp) || !errors.Is(prepareErr, ErrCalledFromOp) {
		t.Fatalf("from inside an op: Cleanup = %v, PrepareCapture = %v; want ErrCalledFromOp", cleanupErr, prepareErr)
	}
	if err := s.Cleanup(bg); err != nil { // outside an op: relocates
		t.Fatal(err)
	}
	_ = keep.Free()
}

// Cleanup and Alloc honour their context while they wait for another
// stream's work, with nothing done (defect §9); Stats does not block behind
// the wait.
func TestCleanupAndAllocHonourTheirContextWhileStreamsAreBusy(t *testing.T) {
	d := openHost(t, WithCapacity(24*mib),
		WithProperties(Properties{MaxPageSize: 1 << 30, Alignment: 32, MaxMemory: 24 * mib}))
	s := d.DefaultStream()
	busy, _ := d.NewStream()
	small := mustAlloc(t, s, mib)
	mustWrite(t, small, pattern(mib, 1))
	_ = mustAlloc(t, s, 10*mib) // grows to a 10 MiB page: small sits on an outdated one
	gate := make(chan struct{})
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	_ = busy.Enqueue("busy", nil, func([]storage.Resource) error { <-gate; return nil })
	before := d.Stats()

	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	var cleanupErr error
	within(t, "Cleanup with a deadline", func() { cleanupErr = d.Cleanup(ctx) })
	if !errors.Is(cleanupErr, context.DeadlineExceeded) {
		t.Fatalf("Cleanup with a 50 ms deadline while a stream is busy = %v, want DeadlineExceeded", cleanupErr)
	}
	ctx2, cancel2 := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel2()
	var allocErr error
	// 13 MiB needs a 14 MiB page: 2 + 10 + 14 > 24, so the reservation
	// fails and its make-room cleanup must wait for the busy stream.
	within(t, "Alloc with a deadline", func() { _, allocErr = s.Alloc(ctx2, 13*mib) })
	if !errors.Is(allocErr, context.DeadlineExceeded) {
		t.Fatalf("Alloc whose make-room cleanup must wait = %v, want DeadlineExceeded", allocErr)
	}
	after := d.Stats()
	if after.Relocation.Moves != before.Relocation.Moves || after.ExplicitCleanups != before.ExplicitCleanups {
		t.Fatalf("a cancelled wait left work done: relocations %d → %d, cleanups %d → %d",
			before.Relocation.Moves, after.Relocation.Moves, before.ExplicitCleanups, after.ExplicitCleanups)
	}

	// A wait without a deadline does not hold the lock: Stats answers.
	cleaned := make(chan error, 1)
	go func() { cleaned <- d.Cleanup(bg) }()
	time.Sleep(20 * time.Millisecond) // let it reach its wait (either order must hold)
	within(t, "Stats while a Cleanup waits", func() { _ = d.Stats(); _ = d.Report() })
	close(gate)
	if err := <-cleaned; err != nil {
		t.Fatal(err)
	}
	wantBytes(t, small, pattern(mib, 1))
}

// A relocating Cleanup is not starved by another goroutine that keeps
// enqueueing work: after a few rounds the settle holds new work back until
// it has relocated (the enqueuer then goes on).
func TestCleanupIsNotStarvedByAContinuousFlowOfWork(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	busy, _ := d.NewStream()
	keep := mustAlloc(t, s, 4*mib+3)
	mustWrite(t, keep, pattern(4*mib+3, 9))
	mustFree(t, mustAlloc(t, s, 7*mib)) // keep sits on an outdated page
	stop := make(chan struct{})
	enqueued := make(chan int)
	flowing := make(chan struct{}) // closed once the flow has enqueued twice
	go func() {
		n := 0
		defer func() { enqueued <- n }()
		defer func() {
			if n < 2 {
				close(flowing)
			}
		}()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := busy.Enqueue("tick", nil, func([]storage.Resource) error { time.Sleep(200 * time.Microsecond); return nil }); err != nil {
				return
			}
			n++
			if n == 2 {
				close(flowing)
			}
			if n%2 == 0 { // one op in flight at most, one queued: the stream is never idle for long
				_ = busy.Synchronize(bg)
			}
		}
	}()
	// The flow is running before the Cleanup starts (a sleep alone did not
	// make sure of it on a loaded machine: the goroutine could first run
	// after the Cleanup and see stop closed).
	<-flowing
	before := d.Stats().Relocation.Moves
	within(t, "a relocating Cleanup under a continuous flow of work", func() {
		if err := d.Cleanup(bg); err != nil {
			t.Errorf("Cleanup: %v", err)
		}
	})
	close(stop)
	if n := <-enqueued; n == 0 {
		t.Fatal("the flow of work never ran")
	}
	if after := d.Stats().Relocation.Moves; after == before {
		t.Fatal("the Cleanup relocated nothing")
	}
	wantBytes(t, keep, pattern(4*mib+3, 9))
}

// On Sim, two goroutines each run one stream's held ops, and each op
// enqueues on the other's stream (allowed from an op): neither flush waits
// for the other runner (found in review).
func TestSimOpsEnqueueingOnEachOthersStreams(t *testing.T) {
	d, err := Open(WithSim())
	if err != nil {
		t.Fatal(err)
	}
	a := d.DefaultStream()
	b, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	started1, started2 := make(chan struct{}), make(chan struct{})
	done := make(chan error, 2)
	noop := func([]storage.Resource) error { return nil }
	go func() {
		done <- a.Enqueue("op1", nil, func([]storage.Resource) error {
			close(started1)
			<-started2
			return b.Enqueue("op1-inner", nil, noop)
		})
	}()
	go func() {
		done <- b.Enqueue("op2", nil, func([]storage.Resource) error {
			close(started2)
			<-started1
			return a.Enqueue("op2-inner", nil, noop)
		})
	}()
	for i := 0; i < 2; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(deadlockTimeout):
			t.Fatal("deadlock: each op's Enqueue waits for the other queue's runner")
		}
	}
	_ = d.Close()
}

// Plain cross-stream use on Sim from several goroutines: A's wait step needs
// only B@1 and B's only A@1; a runner waits for the other queue only up to
// the step it needs, not behind the other's own wait step (found in
// review).
func TestSimCrossStreamWaitsOfTwoRunners(t *testing.T) {
	d, err := Open(WithSim())
	if err != nil {
		t.Fatal(err)
	}
	a := d.DefaultStream()
	b, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	bufA := mustAlloc(t, a, 4096)
	bufB := mustAlloc(t, b, 4096)
	ch1, ch2 := make(chan struct{}), make(chan struct{})
	in1, in2 := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 4)
	// G2: B's runner, blocked in b1 (writes bufB).
	go func() {
		errs <- b.Enqueue("b1", []Use{{Buffer: bufB, Access: Write}}, func([]storage.Resource) error { close(in2); <-ch2; return nil })
	}()
	<-in2
	// G1: A's runner, blocked in a1 (writes bufA).
	go func() {
		errs <- a.Enqueue("a1", []Use{{Buffer: bufA, Access: Write}}, func([]storage.Resource) error { close(in1); <-ch1; return nil })
	}()
	<-in1
	// a2 on A reads bufB: A waits on B@1. b2 on B reads bufA: B waits on A@1.
	go func() {
		errs <- a.Enqueue("a2", []Use{{Buffer: bufB, Access: Read}}, func([]storage.Resource) error { return nil })
	}()
	go func() {
		errs <- b.Enqueue("b2", []Use{{Buffer: bufA, Access: Read}}, func([]storage.Resource) error { return nil })
	}()
	// Let both enqueues issue their steps.
	deadline := time.Now().Add(5 * time.Second)
	for {
		fa, _ := a.Queue().Fence()
		fb, _ := b.Queue().Fence()
		if fa.Seq >= 3 && fb.Seq >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("steps not issued: A %d, B %d", fa.Seq, fb.Seq)
		}
		time.Sleep(time.Millisecond)
	}
	close(ch1)
	close(ch2)
	for i := 0; i < 4; i++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(deadlockTimeout):
			t.Fatalf("deadlock: A completed %d, B completed %d", a.Queue().Completed(), b.Queue().Completed())
		}
	}
	_ = d.Close()
}
