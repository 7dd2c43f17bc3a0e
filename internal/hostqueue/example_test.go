package hostqueue_test

import (
	"context"
	"fmt"

	"github.com/gpumem/gpumem/internal/hostqueue"
	"github.com/gpumem/gpumem/stream"
)

// A Host queue runs ops in order on its worker; a fence and Wait synchronise
// the host with it. A capture records ops instead of running them, and the
// sealed executable replays them.
func ExampleHost() {
	q := hostqueue.NewHost()
	defer q.Close()
	ctx := context.Background()

	q.Enqueue(stream.Op{Name: "hello", Run: func() error { fmt.Println("hello"); return nil }})
	f, _ := q.Fence()
	q.Wait(ctx, f) // "hello" has printed

	const owner stream.Owner = 1
	q.BeginCapture(owner)
	q.Enqueue(stream.Op{Name: "step", Run: func() error { fmt.Println("step"); return nil }})
	graph, _ := q.EndCapture(owner, nil) // nothing printed while recording

	for range 2 {
		q.Replay(graph)
	}
	f, _ = q.Fence()
	q.Wait(ctx, f)
	fmt.Println("completed", q.Completed())
	// Output:
	// hello
	// step
	// step
	// completed 3
}
