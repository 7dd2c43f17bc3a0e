package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/storage"
	"github.com/gpumem/gpumem/stream"
)

// ledger records, in the order they ran, the ops that note themselves.
type ledger struct {
	mu  sync.Mutex
	ran []string
}

// op enqueues on s an op named what over uses that notes itself when it
// runs.
func (l *ledger) op(c *checker, s *gpumem.Stream, what string, uses ...gpumem.Use) {
	c.t.Helper()
	err := s.Enqueue("backendtest."+what, uses, func([]storage.Resource) error {
		l.mu.Lock()
		l.ran = append(l.ran, what)
		l.mu.Unlock()
		return nil
	})
	c.ok("Enqueue of "+what, err)
}

func (l *ledger) order() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ran)
}

// checkOrder: ops complete in enqueue order on a stream; Synchronize waits
// for every op enqueued before it; the queue's fences advance and are
// passed by then; Writes apply in order; a failed op's output reads as
// ErrUnwritten while Synchronize succeeds.
func checkOrder(c *checker) {
	d := c.device()
	ctx := context.Background()
	s := d.DefaultStream()
	q := s.Queue()

	buf := c.alloc(s, 4096)
	var l ledger
	var want []string
	done := c.stall(s, 20*time.Millisecond)
	var last uint64
	for i := range 32 {
		what := fmt.Sprintf("op-%02d", i)
		l.op(c, s, what, gpumem.Use{Buffer: buf, Access: gpumem.ReadWrite})
		want = append(want, what)
		f, err := q.Fence()
		c.ok("Queue.Fence", err)
		if f.Seq <= last {
			c.fatalf("the fence after op %d has sequence %d, not past the one before it (%d)", i, f.Seq, last)
		}
		last = f.Seq
	}
	c.sync(s)
	if !done() {
		c.fatalf("Synchronize returned before a stalling op enqueued before it ran")
	}
	if got := l.order(); !slices.Equal(got, want) {
		c.fatalf("after Synchronize the ops ran as %v, want %v (enqueue order, all of them)", got, want)
	}
	if got := q.Completed(); got < last {
		c.fatalf("after Synchronize Queue.Completed is %d, before the last fence %d", got, last)
	}
	c.ok("Queue.Wait on a passed fence", q.Wait(ctx, stream.Fence{Q: q, Seq: last}))

	// Writes apply in stream order: each later one overwrites a shorter
	// prefix.
	n := uint64(256 << 10)
	w := c.alloc(s, n)
	want1 := pattern(n, 1)
	c.write(w, want1)
	for i, k := range []uint64{n / 2, n / 4, n / 8} {
		p := pattern(k, uint32(i+2))
		c.write(w, p)
		copy(want1, p)
	}
	c.want("a buffer after four Writes", w, want1)

	// A device op is ordered between Writes: the copy sees the first
	// write, not the one enqueued after it.
	if c.o.Copy != nil {
		src, dst := c.alloc(s, n), c.alloc(s, n)
		a, b := pattern(n, 20), pattern(n, 21)
		c.write(src, a)
		c.copyOp(s, dst, src)
		c.write(src, b)
		c.want("a copy enqueued between two Writes of its source", dst, a)
		c.want("the copy's source after the second Write", src, b)
		c.free(src, dst)
	} else {
		c.t.Logf("%s: no Options.Copy: the order of a device op between Writes is not checked", c.name)
	}

	// A failed op: Synchronize still succeeds; its output is unwritten
	// until the next write.
	bad := errors.New("backendtest: the op fails on purpose")
	err := s.Enqueue("backendtest.fail", []gpumem.Use{{Buffer: w, Access: gpumem.Write}}, func([]storage.Resource) error { return bad })
	c.ok("Enqueue of a failing op", err)
	c.sync(s)
	if c.o.NoBytes {
		c.t.Logf("%s: Options.NoBytes: a failed op's marks, seen through Read, are not checked", c.name)
	} else if _, err := w.Read(ctx); !isErr(err, gpumem.ErrUnwritten) || !errors.Is(err, bad) {
		c.fatalf("Read of a buffer a failed op was to write = %v, want ErrUnwritten wrapping the op's error", err)
	}
	c.write(w, want1)
	c.want("a buffer written again after a failed op", w, want1)

	c.free(buf, w)
	c.cleanup()
	c.empty("after the order checks")
}
