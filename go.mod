module github.com/gpumem/gpumem

go 1.25.0

require (
	github.com/ebitengine/purego v0.11.3
	pgregory.net/rapid v1.3.0
)
