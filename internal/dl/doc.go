// Package dl opens a driver's shared library at run time and looks up its
// symbols, for the backends that load their driver with purego instead of
// cgo (cuda, vulkan): one place for the rules both follow.
//
// # Owns
//
//   - Open: dlopen with RTLD_NOW (a broken library fails at the open, not
//     at a later call), and RTLD_GLOBAL or RTLD_LOCAL as the driver wants.
//     dlerror's message is per OS thread, and purego.Dlopen calls dlopen
//     then dlerror, so the goroutine is locked to its thread around it: a
//     failed open always carries the loader's reason, or says it had none.
//   - Symbol: an address, 0 when the library does not export the name, so
//     a backend can tell required symbols from optional ones itself.
//
// Invariant: a library is never closed. Drivers keep threads running in
// their code (CUDA's workers, Vulkan ICDs' queues), and unloading under
// them is not safe; a process loads its driver once.
//
// # Must not know
//
// Which library, which symbols, or what a missing one means: those are the
// backend's. Off Linux, Open fails with ErrUnsupportedOS.
package dl
