package gpumem

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gpumem/gpumem/storage"
)

// W1: a successful Write enqueued after a failing op, before its failure
// was collected, replaces the marks: the bytes read back (defect §4). Both
// timings of the collection.
func TestWriteAfterAFailingOpBeforeItsFailureIsCollected(t *testing.T) {
	for _, collectedFirst := range []bool{false, true} {
		d := openHost(t)
		s := d.DefaultStream()
		b := mustAlloc(t, s, 64)
		gate := make(chan struct{})
		_ = s.Enqueue("gate", nil, func([]storage.Resource) error { <-gate; return nil })
		_ = s.Enqueue("fails", []Use{{Buffer: b, Access: Write}},
			func([]storage.Resource) error { return errors.New("boom") })
		if collectedFirst {
			close(gate)
			if err := s.Synchronize(bg); err != nil {
				t.Fatal(err)
			}
		}
		want := bytes.Repeat([]byte{7}, 64)
		mustWrite(t, b, want) // after the failing op
		if !collectedFirst {
			close(gate)
		}
		if got, err := b.Read(bg); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("collected first=%v: the last op was a successful full Write, yet Read = %v", collectedFirst, err)
		}
	}
}

// W1 across streams: another stream's write of the buffer, enqueued after
// the failing op, replaces the marks too.
func TestAnotherStreamsLaterWriteReplacesAFailuresMarks(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	o, _ := d.NewStream()
	b := mustAlloc(t, s, 64)
	gate := make(chan struct{})
	_ = s.Enqueue("gate", nil, func([]storage.Resource) error { <-gate; return nil })
	_ = s.Enqueue("fails", []Use{{Buffer: b, Access: Write}}, func([]storage.Resource) error { return errors.New("boom") })
	if err := o.Enqueue("rewrites", []Use{{Buffer: b, Access: Write}}, func(r []storage.Resource) error {
		copy(r[0].Bytes, pattern(64, 3))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := o.Synchronize(bg); err != nil {
		t.Fatal(err)
	}
	wantBytes(t, b, pattern(64, 3))
}

// W1 on part of a range: only the bytes the later write did not replace
// stay marked.
func TestALaterPartialWriteLeavesTheRestMarked(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	b := mustAlloc(t, s, 64)
	gate := make(chan struct{})
	_ = s.Enqueue("gate", nil, func([]storage.Resource) error { <-gate; return nil })
	_ = s.Enqueue("fails", []Use{{Buffer: b, Access: Write}}, func([]storage.Resource) error { return errors.New("boom") })
	_ = s.Enqueue("head", []Use{{Buffer: b, Access: Write, Size: 32}}, func([]storage.Resource) error { return nil })
	close(gate)
	if _, err := b.Read(bg); !errors.Is(err, ErrUnwritten) {
		t.Fatalf("Read with the tail left unwritten = %v, want ErrUnwritten", err)
	}
	if err := s.Enqueue("tail", []Use{{Buffer: b, Access: Write, Offset: 32}}, func([]storage.Resource) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(bg); err != nil {
		t.Fatalf("Read after both halves were rewritten = %v", err)
	}
}

// W2: an op consuming bytes a failed op left unwritten is skipped, and its
// output marked, whether the failure was collected before its Enqueue or
// not (defect §5).
func TestDownstreamOfAFailedOpIsSkippedWhateverTheTiming(t *testing.T) {
	for _, collectedFirst := range []bool{true, false} {
		d := openHost(t)
		s := d.DefaultStream()
		x := mustAlloc(t, s, 64)
		y := mustAlloc(t, s, 64)
		mustWrite(t, y, make([]byte, 64))
		gate := make(chan struct{})
		_ = s.Enqueue("gate", nil, func([]storage.Resource) error { <-gate; return nil })
		root := errors.New("boom")
		_ = s.Enqueue("fails", []Use{{Buffer: x, Access: Write}}, func([]storage.Resource) error { return root })
		if collectedFirst {
			close(gate)
			_ = s.Synchronize(bg)
		}
		ran := false
		_ = s.Enqueue("consume", []Use{{Buffer: x, Access: Read}, {Buffer: y, Access: Write}},
			func(r []storage.Resource) error { ran = true; copy(r[1].Bytes, r[0].Bytes); return nil })
		if !collectedFirst {
			close(gate)
		}
		_, errY := y.Read(bg)
		if !errors.Is(errY, ErrUnwritten) || !errors.Is(errY, root) {
			t.Fatalf("collected first=%v: Read(y) = %v, want ErrUnwritten wrapping the root failure", collectedFirst, errY)
		}
		if ran {
			t.Fatalf("collected first=%v: the consumer ran on bytes nothing wrote", collectedFirst)
		}
	}
}

// W2 across streams and through a chain: a consumer on another stream, and
// the consumer of its output, are both skipped before any collection.
func TestASkipPropagatesAcrossStreamsBeforeCollection(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	o, _ := d.NewStream()
	x := mustAlloc(t, s, 64)
	y := mustAlloc(t, o, 64)
	z := mustAlloc(t, s, 64)
	gate := make(chan struct{})
	_ = s.Enqueue("gate", nil, func([]storage.Resource) error { <-gate; return nil })
	_ = s.Enqueue("fails", []Use{{Buffer: x, Access: Write}}, func([]storage.Resource) error { return errors.New("root") })
	ran := 0
	cp := func(r []storage.Resource) error { ran++; copy(r[1].Bytes, r[0].Bytes); return nil }
	_ = o.Enqueue("middle", []Use{{Buffer: x, Access: Read}, {Buffer: y, Access: Write}}, cp)
	_ = s.Enqueue("last", []Use{{Buffer: y, Access: Read}, {Buffer: z, Access: Write}}, cp)
	close(gate)
	_, err := z.Read(bg)
	if !errors.Is(err, ErrUnwritten) || ran != 0 {
		t.Fatalf("Read(z) = %v after %d copies ran, want ErrUnwritten and none", err, ran)
	}
}

// A successful later write between the failure and the consumer breaks the
// dependency: the consumer runs on the rewritten bytes.
func TestAConsumerOfRewrittenBytesRuns(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	x := mustAlloc(t, s, 64)
	y := mustAlloc(t, s, 64)
	gate := make(chan struct{})
	_ = s.Enqueue("gate", nil, func([]storage.Resource) error { <-gate; return nil })
	_ = s.Enqueue("fails", []Use{{Buffer: x, Access: Write}}, func([]storage.Resource) error { return errors.New("boom") })
	mustWrite(t, x, pattern(64, 9))
	_ = s.Enqueue("consume", []Use{{Buffer: x, Access: Read}, {Buffer: y, Access: Write}},
		func(r []storage.Resource) error { copy(r[1].Bytes, r[0].Bytes); return nil })
	close(gate)
	wantBytes(t, y, pattern(64, 9))
}

func TestSpanSubtract(t *testing.T) {
	got := span{0, 100}.subtract([]span{{10, 20}, {50, 120}, {0, 5}})
	want := []span{{5, 10}, {20, 50}}
	if len(got) != len(want) {
		t.Fatalf("subtract = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("subtract = %v, want %v", got, want)
		}
	}
}

// W1 for marks placed without a running op: the latest writer of x in
// enqueue order is C, skipped at its Enqueue because its input y carries
// failure F; an earlier op A that wrote x and failed, collected only
// afterwards, leaves x to C (found in review).
func TestAnOpSkippedAtEnqueueKeepsItsPlaceInTheWriteOrder(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	u, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	x := mustAlloc(t, s, 64)
	y := mustAlloc(t, u, 64)
	errA := errors.New("A failed")
	errF := errors.New("F failed")
	release := make(chan struct{})
	// A writes x and fails, but only once released: not yet collected.
	if err := s.Enqueue("A", []Use{{Buffer: x, Access: Write}}, func([]storage.Resource) error {
		<-release
		return errA
	}); err != nil {
		t.Fatal(err)
	}
	// F writes y on another stream and fails; collected by u's Synchronize.
	if err := u.Enqueue("F", []Use{{Buffer: y, Access: Write}}, func([]storage.Resource) error { return errF }); err != nil {
		t.Fatal(err)
	}
	if err := u.Synchronize(bg); err != nil {
		t.Fatal(err)
	}
	// C reads y (collected failure F) and writes x: skipped at enqueue, x
	// marked with F. C is x's latest writer in enqueue order.
	if err := s.Enqueue("C", []Use{{Buffer: y, Access: Read}, {Buffer: x, Access: Write}}, func([]storage.Resource) error {
		t.Error("C ran")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := s.Synchronize(bg); err != nil {
		t.Fatal(err)
	}
	_, err = x.Read(bg)
	if !errors.Is(err, ErrUnwritten) {
		t.Fatalf("Read(x) = %v, want ErrUnwritten", err)
	}
	if !errors.Is(err, errF) || errors.Is(err, errA) {
		t.Fatalf("Read(x) = %v: want F's failure (C, skipped for F, is x's latest writer), not A's", err)
	}
}

// A placeholder writer (an op skipped at its Enqueue) is no dependency: once
// a later successful write replaced its bytes and completed, a reader of
// them runs, even while an earlier writer of another of its outputs keeps the
// placeholder in the index (found by the shadow model).
func TestAReaderOfBytesRewrittenAfterASkippedOpRuns(t *testing.T) {
	d := openHost(t)
	s := d.DefaultStream()
	u, _ := d.NewStream()
	x := mustAlloc(t, s, 64)
	y := mustAlloc(t, s, 64)
	z := mustAlloc(t, u, 64)
	_ = s.Enqueue("F", []Use{{Buffer: y, Access: Write}}, func([]storage.Resource) error { return errors.New("F failed") })
	_ = s.Synchronize(bg) // F's failure is collected: y is marked
	release := make(chan struct{})
	defer close(release)
	_ = u.Enqueue("A", []Use{{Buffer: z, Access: Write}}, func([]storage.Resource) error { <-release; return nil }) // an earlier writer of z, pending
	_ = s.Enqueue("C", []Use{{Buffer: y, Access: Read}, {Buffer: x, Access: Write}, {Buffer: z, Access: Write}},
		func([]storage.Resource) error { t.Error("C ran on bytes F left unwritten"); return nil })
	mustWrite(t, x, pattern(64, 5)) // replaces C's marks on x
	_ = s.Synchronize(bg)
	out := mustAlloc(t, s, 64)
	ran := false
	_ = s.Enqueue("reads-x", []Use{{Buffer: x, Access: Read}, {Buffer: out, Access: Write}},
		func(r []storage.Resource) error { ran = true; copy(r[1].Bytes, r[0].Bytes); return nil })
	_ = s.Synchronize(bg)
	if !ran {
		t.Fatal("a reader of bytes a completed write replaced was skipped")
	}
	wantBytes(t, out, pattern(64, 5))
}
