package trace

import _ "embed"

// Parameters of the embedded default trace; TestDefaultTraceIsTheGeneratorOutput
// regenerates testdata/default.jsonl from them (go test ./trace -run
// TestDefaultTrace -update).
const (
	defaultWorkload = "llm-server"
	defaultSeed     = 1
	defaultAllocs   = 1500
)

//go:embed testdata/default.jsonl
var defaultTrace []byte

// Default returns a small embedded trace for demos and smoke tests: the
// llm-server workload with a fixed seed, as JSONL with a header. The bytes
// are shared; callers must not modify them.
func Default() (name string, data []byte) {
	return "llm-server-seed1", defaultTrace
}
