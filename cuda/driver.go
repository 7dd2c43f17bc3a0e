package cuda

import (
	"fmt"
	"os"

	"github.com/gpumem/gpumem/cuda/internal/driver"
)

// EnvLibrary names the environment variable that overrides the driver
// library path ("libcuda.so.1") when Options.Library is empty. Tests point it
// (or Options.Library) at the fake driver built from testdata/fakecuda.c.
const EnvLibrary = "GPUMEM_LIBCUDA"

// MinDriverVersion is the oldest driver API version the package runs on,
// as cuDriverGetVersion reports it (1000·major + 10·minor): CUDA 11.4, the
// first with cuGraphInstantiateWithFlags, the newest required symbol
// (Linux driver R470). Newer optional groups are listed on Features.
const MinDriverVersion = 11040

// defaultLibrary is the driver's versioned name. Never plain "libcuda.so":
// that is often the toolkit's link-time stub, which loads but fails every
// call.
const defaultLibrary = "libcuda.so.1"

// libraryPath resolves the library to load: explicit, then $GPUMEM_LIBCUDA,
// then libcuda.so.1.
func libraryPath(explicit string) string {
	if explicit != "" {
		return explicit
	}
	if p := os.Getenv(EnvLibrary); p != "" {
		return p
	}
	return defaultLibrary
}

// cudaDriver is the loaded driver (package cuda/internal/driver's bindings)
// with the package's error check.
type cudaDriver struct{ *driver.Driver }

// loadDriver opens the library at path and binds it: a library that does
// not load, or lacks a required symbol (named), is an error wrapping
// ErrNoDriver, never a panic; a missing optional symbol leaves its feature
// off.
func loadDriver(path string) (*cudaDriver, error) {
	d, missing, err := driver.Load(path)
	if err != nil {
		return nil, fmt.Errorf("%w: load %s: %v", ErrNoDriver, path, err)
	}
	if missing != "" {
		return nil, fmt.Errorf("%w: %s lacks required symbol %s (driver too old? the cuda backend needs CUDA %d.%d, Linux driver R470 or later)",
			ErrNoDriver, path, missing, MinDriverVersion/1000, MinDriverVersion%1000/10)
	}
	return &cudaDriver{d}, nil
}

// check turns a CUresult into nil or a *DriverError for op.
func (d *cudaDriver) check(op string, rc int32) error {
	if rc == driver.CodeSuccess {
		return nil
	}
	return &DriverError{Op: op, Code: int(rc), Name: d.ErrorName(rc)}
}
