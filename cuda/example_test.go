package cuda_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/cuda"
)

// scalePTX scales n floats in place: x[i] *= a.
const scalePTX = `.version 7.0
.target sm_52
.address_size 64

.visible .entry scale(.param .u64 scale_x, .param .u64 scale_n, .param .f32 scale_a)
{
	.reg .pred %p<2>;
	.reg .f32  %f<3>;
	.reg .b32  %r<4>;
	.reg .b64  %rd<7>;

	ld.param.u64       %rd1, [scale_x];
	ld.param.u64       %rd2, [scale_n];
	ld.param.f32       %f1, [scale_a];
	mov.u32            %r1, %ctaid.x;
	mov.u32            %r2, %ntid.x;
	mov.u32            %r3, %tid.x;
	mul.wide.u32       %rd3, %r1, %r2;
	cvt.u64.u32        %rd4, %r3;
	add.u64            %rd3, %rd3, %rd4;
	setp.ge.u64        %p1, %rd3, %rd2;
	@%p1 bra           DONE;
	cvta.to.global.u64 %rd5, %rd1;
	shl.b64            %rd6, %rd3, 2;
	add.u64            %rd5, %rd5, %rd6;
	ld.global.f32      %f2, [%rd5];
	mul.f32            %f2, %f2, %f1;
	st.global.f32      [%rd5], %f2;
DONE:
	ret;
}
`

// Load a module of your own, launch its kernel inside an op on a gpumem
// buffer, and hand the op's stream to another library.
func Example() {
	dev, err := cuda.OpenDevice(cuda.Options{})
	if errors.Is(err, gpumem.ErrNotSupported) {
		fmt.Println("no CUDA driver here; gpumem.Open runs on the host")
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	ctx := context.Background()
	be := dev.Backend().(*cuda.Backend)

	mod, err := be.LoadModule([]byte(scalePTX))
	var jit *cuda.JITError
	if errors.As(err, &jit) {
		fmt.Println("the JIT refused the PTX:", jit.Log)
		return
	}
	defer mod.Unload() // after dev's work is done: deferred calls run last first
	scale, err := mod.Function("scale")
	if err != nil {
		fmt.Println(err)
		return
	}

	s := dev.DefaultStream()
	const n = 1 << 20
	x, err := s.Alloc(ctx, 4*n)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer x.Free()
	cfg, _ := cuda.Linear(n, 256)
	err = cuda.Enqueue(s, "scale", []gpumem.Use{{Buffer: x, Access: gpumem.ReadWrite}}, func(op *cuda.Op) error {
		// The kernel, on the op's stream, with the buffer's current address.
		if err := op.Launch(scale, cfg, cuda.Use(0), cuda.Val(uint64(n)), cuda.Val(float32(0.5))); err != nil {
			return err
		}
		// A library call (cuBLAS, say, through your bindings) would take
		// these and enqueue on the same stream, within this function only.
		stream, err := op.StreamHandle()
		if err != nil {
			return err
		}
		ptr, size, err := op.DevicePtr(0)
		_, _, _ = stream, ptr, size
		return err
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Synchronize(ctx); err != nil {
		fmt.Println(err)
	}
}
