package gpumem

// captureState is what an open capture window records on its stream.
type captureState struct{}

func (c *captureState) allocatedLocked(*Buffer) {}
func (c *captureState) freedLocked(*Buffer)     {}
func (c *captureState) touchedLocked(resolved)  {}
func (c *captureState) retainLocked([]byte)     {}
