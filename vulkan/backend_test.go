package vulkan_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/vulkan"
)

func TestWriteAndReadDeviceMemoryMappedAndStaged(t *testing.T) {
	for _, staging := range []bool{false, true} {
		name := "mapped"
		if staging {
			name = "staging"
		}
		t.Run(name, func(t *testing.T) {
			d, b := openDevice(t, vulkan.Options{Staging: staging})
			s := d.DefaultStream()
			want := pattern(100*kib+3, 1)
			buf := mustAlloc(t, s, uint64(len(want)))
			mustWrite(t, buf, want)
			wantBytes(t, buf, want)
			if st := d.Stats(); st.BytesAllocated == 0 || vulkan.Allocations(b) == 0 {
				t.Fatalf("BytesAllocated %d, %d device allocations: the buffer is not device memory", st.BytesAllocated, vulkan.Allocations(b))
			}
		})
	}
}

func TestPropertiesFollowTheDevice(t *testing.T) {
	b := openBackend(t, vulkan.Options{})
	p, info := b.Properties(), b.Info()
	if p.Alignment%256 != 0 || p.Alignment%info.Limits.MinStorageBufferOffsetAlignment != 0 || p.Alignment%info.Limits.NonCoherentAtomSize != 0 {
		t.Fatalf("alignment %d does not honour minStorageBufferOffsetAlignment %d and nonCoherentAtomSize %d",
			p.Alignment, info.Limits.MinStorageBufferOffsetAlignment, info.Limits.NonCoherentAtomSize)
	}
	if p.MaxMemory == 0 || p.MaxPageSize > p.MaxMemory/4 || (info.Limits.MaxMemoryAllocationSize > 0 && p.MaxPageSize > info.Limits.MaxMemoryAllocationSize) {
		t.Fatalf("properties %+v against limits %+v", p, info.Limits)
	}
}

func TestNoLoaderIsErrNotSupportedWithAReason(t *testing.T) {
	_, err := vulkan.NewBackend(vulkan.Options{Library: "/nonexistent/libvulkan.so.1"})
	if !errors.Is(err, gpumem.ErrNotSupported) || !errors.Is(err, vulkan.ErrNoLoader) {
		t.Fatalf("NewBackend with no loader = %v, want ErrNotSupported and ErrNoLoader", err)
	}
	if _, err := vulkan.Devices(vulkan.Options{Library: "/nonexistent/libvulkan.so.1"}); !errors.Is(err, vulkan.ErrNoLoader) {
		t.Fatalf("Devices with no loader = %v", err)
	}
}

func TestDeviceSelectionByIndexAndName(t *testing.T) {
	infos, err := vulkan.Devices(vulkan.Options{})
	needVulkan(t, err)
	_, err = vulkan.NewBackend(vulkan.Options{Device: "99"})
	if !errors.Is(err, vulkan.ErrNoDevice) || !errors.Is(err, gpumem.ErrNotSupported) {
		t.Fatalf("device 99 = %v, want ErrNoDevice", err)
	}
	_, err = vulkan.NewBackend(vulkan.Options{Device: "no such device name"})
	if !errors.Is(err, vulkan.ErrNoDevice) {
		t.Fatalf("a name no device has = %v, want ErrNoDevice", err)
	}
	for _, info := range infos {
		if info.Unusable != "" {
			continue
		}
		b := openBackend(t, vulkan.Options{Device: info.Name[:4]})
		if got := b.Info().Name; got != info.Name {
			t.Fatalf("picked %q by name, want %q", got, info.Name)
		}
		t.Setenv(vulkan.EnvDevice, "0")
		b0 := openBackend(t, vulkan.Options{})
		if b0.Info().Index != 0 {
			t.Fatalf("%s=0 picked device %d", vulkan.EnvDevice, b0.Info().Index)
		}
		break
	}
}

func TestCloseReleasesEveryDeviceAllocation(t *testing.T) {
	d, b := openDevice(t, vulkan.Options{})
	s := d.DefaultStream()
	for i := range 5 {
		mustAlloc(t, s, uint64(i+1)*mib)
	}
	if vulkan.Allocations(b) == 0 {
		t.Fatal("no device allocations after five Allocs")
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if n := vulkan.Allocations(b); n != 0 {
		t.Fatalf("%d device allocations left after Close", n)
	}
	if _, err := s.Alloc(context.Background(), 1); err == nil {
		t.Fatal("Alloc after Close worked")
	}
}

func TestGranularPagesAreRefusedWithErrUnsupported(t *testing.T) {
	_, err := vulkan.NewBackend(vulkan.Options{Granular: true})
	if !errors.Is(err, vulkan.ErrUnsupported) {
		t.Fatalf("Options.Granular = %v, want ErrUnsupported", err)
	}
}
