package hostqueue

// Test hooks, compiled into this package's tests only.

// FailNextBeginCapture makes the next BeginCapture that would succeed
// return err instead (wrapped), leaving the queue as it was; nil clears the
// cue.
func (q *Host) FailNextBeginCapture(err error) { q.t.failNextBeginCapture(err) }

// FailNextBeginCapture is Host's, for an Inline queue.
func (q *Inline) FailNextBeginCapture(err error) { q.t.failNextBeginCapture(err) }
