//go:build linux

package cuda

import (
	"fmt"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/internal/backendtest"
)

// The cuda backend passes the conformance suite every Backend passes
// (internal/backendtest) on the fake driver, with granular pages (the
// fake has virtual memory management) and with whole pages; and on the
// real driver where one is found.
func TestBackendConformsOnTheFakeDriver(t *testing.T) {
	for _, granular := range []bool{true, false} {
		name := map[bool]string{true: "granular", false: "whole"}[granular]
		t.Run(name, func(t *testing.T) {
			f := buildFake(t)
			opts := backendtest.Options{
				Name: "cuda/fake/" + name,
				Copy: copyOnStream,
				// Everything that holds device memory: cuMemAlloc's
				// allocations, VMM reservations and physical handles.
				DriverObjects: func() int {
					return int(f.live("allocs")) + int(f.live("reservations")) + int(f.live("physicals"))
				},
			}
			backendtest.TestBackend(t, func(t *testing.T, more ...gpumem.Option) (*gpumem.Device, error) {
				return OpenDevice(Options{Library: f.path}, append([]gpumem.Option{gpumem.WithPageGranular(granular)}, more...)...)
			}, opts)
		})
	}
}

func TestBackendConformsOnTheRealDriver(t *testing.T) {
	path := realLibrary(t)
	backendtest.TestBackend(t, func(t *testing.T, more ...gpumem.Option) (*gpumem.Device, error) {
		return OpenDevice(Options{Library: path}, more...)
	}, backendtest.Options{Name: "cuda/real", Copy: copyOnStream})
}

// copyOnStream is the suite's device copy: cuMemcpyDtoDAsync_v2 inside an
// op on s.
func copyOnStream(s *gpumem.Stream, dst, src gpumem.Buffer) error {
	uses := []gpumem.Use{{Buffer: dst, Access: gpumem.Write}, {Buffer: src, Access: gpumem.Read}}
	return Enqueue(s, "backendtest.copy", uses, func(op *Op) error {
		d, dn, err := op.DevicePtr(0)
		if err != nil {
			return err
		}
		sp, sn, err := op.DevicePtr(1)
		if err != nil {
			return err
		}
		if dn != sn {
			return fmt.Errorf("copy of %d bytes into %d", sn, dn)
		}
		return op.k.Q.s.CopyDtoD(d, sp, sn)
	})
}
