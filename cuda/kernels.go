package cuda

// kernelsPTX is a small PTX module (ISA 7.0, sm_52 and later, JIT-compiled
// by the driver) with two byte kernels, one thread per byte, for tests and
// diagnostics:
//
//	add_one(u64 data, u64 n)          data[i] += 1 for i < n
//	fill_u8(u64 data, u64 n, u32 v)   data[i] = byte(v) for i < n
//
// Launch either with Linear(n, 0) and arguments (uintptr, uint64[, uint32]).
// Each thread computes its index i = ctaid.x·ntid.x + tid.x in 64 bits, so
// n may exceed 2^32 (up to the grid Linear allows).
// The fake driver in testdata recognises both entries and runs them on host
// memory.
const kernelsPTX = `.version 7.0
.target sm_52
.address_size 64

.visible .entry add_one(
	.param .u64 add_one_data,
	.param .u64 add_one_n
)
{
	.reg .pred  %p<2>;
	.reg .b16   %rs<3>;
	.reg .b32   %r<4>;
	.reg .b64   %rd<7>;

	ld.param.u64        %rd1, [add_one_data];
	ld.param.u64        %rd2, [add_one_n];
	mov.u32             %r1, %ctaid.x;
	mov.u32             %r2, %ntid.x;
	mov.u32             %r3, %tid.x;
	mul.wide.u32        %rd3, %r1, %r2;
	cvt.u64.u32         %rd6, %r3;
	add.u64             %rd3, %rd3, %rd6;
	setp.ge.u64         %p1, %rd3, %rd2;
	@%p1 bra            ADD_ONE_DONE;
	cvta.to.global.u64  %rd4, %rd1;
	add.u64             %rd5, %rd4, %rd3;
	ld.global.u8        %rs1, [%rd5];
	add.u16             %rs2, %rs1, 1;
	st.global.u8        [%rd5], %rs2;
ADD_ONE_DONE:
	ret;
}

.visible .entry fill_u8(
	.param .u64 fill_u8_data,
	.param .u64 fill_u8_n,
	.param .u32 fill_u8_value
)
{
	.reg .pred  %p<2>;
	.reg .b16   %rs<2>;
	.reg .b32   %r<5>;
	.reg .b64   %rd<7>;

	ld.param.u64        %rd1, [fill_u8_data];
	ld.param.u64        %rd2, [fill_u8_n];
	ld.param.u32        %r4, [fill_u8_value];
	mov.u32             %r1, %ctaid.x;
	mov.u32             %r2, %ntid.x;
	mov.u32             %r3, %tid.x;
	mul.wide.u32        %rd3, %r1, %r2;
	cvt.u64.u32         %rd6, %r3;
	add.u64             %rd3, %rd3, %rd6;
	setp.ge.u64         %p1, %rd3, %rd2;
	@%p1 bra            FILL_U8_DONE;
	cvta.to.global.u64  %rd4, %rd1;
	add.u64             %rd5, %rd4, %rd3;
	cvt.u16.u32         %rs1, %r4;
	st.global.u8        [%rd5], %rs1;
FILL_U8_DONE:
	ret;
}
`

// Kernel entry names in kernelsPTX.
const (
	kernelAddOne = "add_one"
	kernelFillU8 = "fill_u8"
)
