package main

// cudaInfo says whether the cuda backend can run here.
func cudaInfo() string {
	return "cuda  see examples/cuda (the driver is loaded at run time; no cgo)"
}
