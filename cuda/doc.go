// Package cuda drives an NVIDIA GPU through the CUDA driver API, loaded at
// run time with purego: no cgo, and no driver needed to build or to run
// without one.
//
// Three layers. The purego bindings (package cuda/internal/driver): the
// library, its versioned symbols, the C structures; a bound call returns
// its CUresult. Here, unexported, the driver layer on them: typed driver
// errors, per-thread executors, and the device's primary context with
// streams, events, modules, graph capture and (optionally) virtual memory
// management. On it, the gpumem.Backend adapter (backend.go, storage.go,
// granular.go, queue.go), whose op, capture bookkeeping and host waits are
// package internal/backendkit's, shared with vulkan. The public API is
// what a program needs: OpenDevice (or NewBackend), the Backend, its
// device's description (Backend.Info), and kernels of one's own
// (Backend.LoadModule, Enqueue, Op.Launch). Without a driver OpenDevice
// returns an error wrapping gpumem.ErrNotSupported and ErrNoDriver, and
// callers fall back to gpumem.Open.
//
// # Your own kernels and libraries
//
// Load a module of your own (PTX text, a cubin or a fatbin) into the
// backend's context and look up its kernels:
//
//	mod, err := be.LoadModule(ptx) // a *JITError with the JIT's log on failure
//	saxpy, err := mod.Function("saxpy")
//	defer mod.Unload() // explicit: there is no finalizer
//
// Launch inside an op with Enqueue: the run function gets an *Op whose
// Launch enqueues on the op's stream, with Use(i) and UseAt(i, off) for the
// current device address of the op's i-th use and Val for scalars of 1, 2,
// 4 or 8 bytes. Ordering across streams, capture into graphs
// (gpumem.Stream.Capture) and failure marks hold as for any op.
//
//	err = cuda.Enqueue(s, "saxpy", uses, func(op *cuda.Op) error {
//		return op.Launch(saxpy, cfg, cuda.Val(n), cuda.Val(float32(2)), cuda.Use(0), cuda.Use(1))
//	})
//
// Arguments are checked against the kernel's parameters where they are
// known (cuFuncGetParamInfo, or the PTX's .param list): a mismatch is an
// *ArgError matching ErrArgs, and nothing reaches the driver.
//
// For other libraries (cuBLAS, cuDNN, NCCL, through your own bindings),
// Op.StreamHandle returns the op's CUstream and Op.DevicePtr a use's
// address; Op.StreamHandle's documentation lists what such a call may and
// must not do. Both are valid only while the run function runs.
//
// # Owns
//
//   - Loading: NewBackend and Available dlopen "libcuda.so.1" (RTLD_NOW |
//     RTLD_GLOBAL), never plain "libcuda.so", which is often a link-time stub.
//     Options.Library, else the environment variable GPUMEM_LIBCUDA
//     (EnvLibrary), overrides the path; tests use it to load the fake driver
//     built from testdata/fakecuda.c.
//   - Binding (cuda/internal/driver): the versioned symbols (cuMemAlloc_v2,
//     cuStreamBeginCapture_v2, ...), each probed with dlsym before it is
//     registered. A missing required symbol makes NewBackend fail with an
//     error wrapping ErrNoDriver that
//     names it (the minimum is MinDriverVersion, CUDA 11.4); missing
//     optional ones (the eight VMM functions as a group, the four of the
//     library API as a group, cuFuncGetParamInfo, cuMemsetD8Async) leave
//     their feature off (Backend.Info().Features): VMM and memset calls
//     return ErrUnsupported, kernel parameters come from the PTX only.
//     (Modules load through cuModuleLoadDataEx with or without the library API:
//     module.go says why.)
//   - dlopen and dlerror run on one locked OS thread, so a failed load
//     always carries the loader's reason.
//   - Modules (module.go): Backend.LoadModule (cuModuleLoadDataEx, then every PTX
//     entry looked up, so a JIT refusal is LoadModule's *JITError under
//     lazy module loading too), Function, Unload; launch arguments
//     (args.go) and ops that launch (op.go).
//   - Errors: every failed call is a *DriverError{Op, Code, Name} matching,
//     with errors.Is, storage.ErrOutOfMemory (2), storage.ErrDevicePoisoned
//     (214, 700, 710, 714–719), ErrCaptureInvalidated (900, 901),
//     ErrCaptureUnsupported (900), ErrCaptureUnjoined (904),
//     ErrCapturedEvent (907) and ErrWrongOwner (908).
//   - Threading: executors, each one goroutine locked to one OS thread.
//   - The backend (design §9.6): Properties (alignment 256, MaxMemory the
//     device's total, MaxPageSize a quarter of it); a storage on
//     cuMemAlloc_v2 whose frees wait for Flush and, while any queue of the
//     backend records, for a later Flush; where the driver manages virtual
//     memory (Features().VirtualMemory, unless GPUMEM_CUDA_GRANULAR=0), a
//     storage.Granular (granular.go): pages reserve address space
//     (cuMemAddressReserve) and map granules on demand, one cuMemCreate +
//     cuMemMap + cuMemSetAccess each, their unmaps queued like frees and
//     carried out by Flush after cuCtxSynchronize; queues whose steps each
//     end with an event, Completed advanced by a watcher thread, WaitFence as
//     cuStreamWaitEvent, captures through cuStreamBeginCapture_v2 and
//     cuGraphInstantiateWithFlags; relocation copies with
//     cuMemcpyDtoDAsync_v2 on the relocating stream, covered by its next
//     Fence; WaitOutsideStreams as cuCtxSynchronize; Write and Read through
//     cuMemcpyHtoDAsync_v2 and cuMemcpyDtoHAsync_v2 inside ops; Enqueue's
//     ops for kernels and libraries of one's own (op.go), and for the tests
//     the kernels of kernels.go; the first sticky error kept
//     (Backend.Poisoned).
//
// # Invariants
//
//   - (C1) Every driver call made for a context runs on one of its
//     executors, whose thread has the context current: the device executor
//     (the context's methods, modules, VMM) or a stream's executor (the
//     methods of a driverStream and of its events and graphs).
//   - (C2) A stream's capture begins and ends on its executor's thread, in
//     CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, so the device executor's
//     allocations and frees, on another thread, do not invalidate it.
//   - (C3) Nothing here panics for want of a driver, symbol or device: those
//     are errors wrapping ErrNoDriver.
//
// # Does not know
//
// Pages, pools, handles or when to relocate: the device (package gpumem)
// decides; the backend maps its storage and stream operations onto the
// driver layer and decides only when to defer frees (a free during a
// capture may invalidate it).
//
// # Concurrency
//
// The driver layer's methods (primaryContext, driverStream, event, graph,
// graphExec) are safe for concurrent use: each call is handed to its executor and runs there in arrival order.
// A function running on an executor may call methods bound to the same
// executor; they run at once, inline. Calls on other executors block until
// those run theirs.
//
// A queue's watcher is an executor in all but name: a goroutine locked to
// its own thread with the context current, which only synchronises the
// queue's events. Storage calls take the device executor while the device
// lock is held; executors and watchers never take the device lock.
//
// Host copies use pageable Go memory: by the driver's rules the host buffer
// has been read (CopyHtoD) or written (CopyDtoH) when the call returns, so Go
// memory is never held by the driver after a call.
package cuda
