// Kernels: compute shaders from SPIR-V, with their pipelines.

package vulkan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// KernelSpec says how a compute shader takes its arguments: storage
// buffers at descriptor set 0, bindings 0 to Buffers-1, and PushConstants
// bytes of push constants (a multiple of 4, at most maxPushConstantsSize)
// at offset 0. Entry is the entry point ("" = "main").
//
// GridStride says the shader loops over its items with a stride of the
// whole grid (gl_NumWorkGroups times its local size), so it covers them
// with any number of groups. Dispatch then runs at most MaxStrideGroups
// groups per dimension (fewer where the device allows fewer) whatever
// count it is given, instead of refusing a count past the device's
// maxComputeWorkGroupCount: GroupsFor(n, local) works for any n. The
// module must read gl_NumWorkGroups (LoadKernel checks). The shipped
// kernels are grid-stride kernels.
type KernelSpec struct {
	Entry         string
	Buffers       int
	PushConstants uint32
	GridStride    bool
}

// MaxStrideGroups is the most groups per dimension Dispatch runs of a
// GridStride kernel: the least maxComputeWorkGroupCount Vulkan allows a
// device, so the same count runs everywhere, and small enough that a
// shader's 32-bit invocation index and stride cannot wrap (65,535 groups of
// at most 1,024 invocations each). It keeps any device busy: a grid-stride
// kernel gains nothing from more.
const MaxStrideGroups = 65535

// Kernel is a compute pipeline: a shader module, its descriptor set layout
// and pipeline layout, made by Backend.LoadKernel. Dispatch it inside an op
// with Op.Dispatch. Close destroys it (the Backend does at the latest).
type Kernel struct {
	b    *Backend
	name string
	spec KernelSpec

	mu       sync.Mutex // guards the handles (0 once destroyed)
	module   uint64
	setLay   uint64
	pipeLay  uint64
	pipeline uint64
}

// Name returns the kernel's name.
func (k *Kernel) Name() string { return k.name }

const spirvMagic = 0x07230203

// LoadKernel builds a compute pipeline from SPIR-V (as glslc writes it:
// little-endian 32-bit words). The spec is checked against the module
// first: its storage buffer bindings at set 0 must be exactly 0 to
// spec.Buffers-1, and its push-constant block (the highest member offset
// plus that member's size, as the module lays it out) exactly
// spec.PushConstants bytes (0 without a block); a mismatch, a module that
// is not SPIR-V or a spec past the device's limits is an *ArgError
// matching ErrArgs, and the driver saw nothing. Dispatch then refuses
// pushes of any other size. name names the kernel in errors.
func (b *Backend) LoadKernel(name string, spirv []byte, spec KernelSpec) (*Kernel, error) {
	if err := b.usable("load kernel " + name); err != nil {
		return nil, err
	}
	if spec.Entry == "" {
		spec.Entry = "main"
	}
	if err := b.checkSpec(name, spirv, spec); err != nil {
		return nil, err
	}
	d := b.dev
	k := &Kernel{b: b, name: name, spec: spec}
	fail := func(err error) (*Kernel, error) {
		k.destroy()
		b.notePoison(err)
		return nil, fmt.Errorf("vulkan: load kernel %s: %w", name, err)
	}
	code := slices.Clone(spirv) // word-aligned for the driver
	words := make([]uint32, len(code)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(code[4*i:])
	}
	smci := &vk.ShaderModuleCreateInfo{SType: vk.StShaderModuleCreateInfo, CodeSize: uintptr(len(code)), PCode: unsafe.Pointer(&words[0])}
	if err := check("vkCreateShaderModule", vk.Call(d.fn.CreateShaderModule, d.h, uintptr(unsafe.Pointer(smci)), 0, uintptr(unsafe.Pointer(&k.module)))); err != nil {
		return fail(err)
	}
	binds := make([]vk.DescriptorSetLayoutBinding, spec.Buffers)
	for i := range binds {
		binds[i] = vk.DescriptorSetLayoutBinding{Binding: uint32(i), DescriptorType: vk.DescriptorTypeStorageBuffer, DescriptorCount: 1, StageFlags: vk.ShaderStageCompute}
	}
	dci := &vk.DescriptorSetLayoutCreateInfo{SType: vk.StDescriptorSetLayoutCreateInfo, BindingCount: uint32(len(binds)), PBindings: ptrOrNil(binds)}
	if err := check("vkCreateDescriptorSetLayout", vk.Call(d.fn.CreateDescriptorSetLayout, d.h, uintptr(unsafe.Pointer(dci)), 0, uintptr(unsafe.Pointer(&k.setLay)))); err != nil {
		return fail(err)
	}
	lays := []uint64{k.setLay}
	pci := &vk.PipelineLayoutCreateInfo{SType: vk.StPipelineLayoutCreateInfo, SetLayoutCount: 1, PSetLayouts: unsafe.Pointer(&lays[0])}
	var pcr *vk.PushConstantRange
	if spec.PushConstants > 0 {
		pcr = &vk.PushConstantRange{StageFlags: vk.ShaderStageCompute, Size: spec.PushConstants}
		pci.PushConstantRangeCount, pci.PPushConstantRanges = 1, unsafe.Pointer(pcr)
	}
	if err := check("vkCreatePipelineLayout", vk.Call(d.fn.CreatePipelineLayout, d.h, uintptr(unsafe.Pointer(pci)), 0, uintptr(unsafe.Pointer(&k.pipeLay)))); err != nil {
		return fail(err)
	}
	entry := vk.CString(spec.Entry)
	cpci := &vk.ComputePipelineCreateInfo{
		SType: vk.StComputePipelineCreateInfo,
		Stage: vk.PipelineShaderStageCreateInfo{
			SType: vk.StPipelineShaderStageCreateInfo, Stage: vk.ShaderStageCompute, Module: k.module, PName: unsafe.Pointer(&entry[0]),
		},
		Layout:            k.pipeLay,
		BasePipelineIndex: -1,
	}
	if err := check("vkCreateComputePipelines", vk.Call(d.fn.CreateComputePipelines, d.h, 0, 1, uintptr(unsafe.Pointer(cpci)), 0, uintptr(unsafe.Pointer(&k.pipeline)))); err != nil {
		return fail(err)
	}
	b.mu.Lock()
	closed := b.closed
	if !closed {
		b.kernels[k] = struct{}{}
	}
	b.mu.Unlock()
	if closed {
		k.destroy()
		return nil, fmt.Errorf("vulkan: load kernel %s: %w", name, ErrClosed)
	}
	return k, nil
}

// checkSpec checks spirv and spec before the driver sees them.
func (b *Backend) checkSpec(name string, spirv []byte, spec KernelSpec) error {
	bad := func(format string, args ...any) error {
		return &ArgError{Kernel: name, Reason: fmt.Sprintf(format, args...)}
	}
	lim := b.dev.info.Limits
	if spec.Buffers < 0 || uint32(spec.Buffers) > lim.MaxPerStageStorageBuffers {
		return bad("KernelSpec.Buffers is %d; the device allows 0 to %d storage buffers per stage", spec.Buffers, lim.MaxPerStageStorageBuffers)
	}
	if spec.PushConstants%4 != 0 || spec.PushConstants > lim.MaxPushConstantsSize {
		return bad("KernelSpec.PushConstants is %d bytes; it must be a multiple of 4 and at most %d (maxPushConstantsSize)", spec.PushConstants, lim.MaxPushConstantsSize)
	}
	bindings, err := spirvBindings(spirv)
	if err != nil {
		return bad("%v", err)
	}
	block, err := spirvPushConstantSize(spirv)
	if err != nil {
		return bad("%v", err)
	}
	if block != spec.PushConstants {
		// Larger: pushes past the shader's block (a mistaken spec; the
		// shader never sees the bytes). Smaller: the shader reads past
		// what is pushed.
		return bad("the module's push-constant block is %d bytes, KernelSpec.PushConstants says %d", block, spec.PushConstants)
	}
	want := make([]uint32, spec.Buffers)
	for i := range want {
		want[i] = uint32(i)
	}
	if !slices.Equal(bindings, want) {
		return bad("the module binds descriptor set 0 at bindings %v, KernelSpec.Buffers = %d says %v", bindings, spec.Buffers, want)
	}
	if spec.GridStride {
		reads, err := spirvReadsNumWorkgroups(spirv)
		if err != nil {
			return bad("%v", err)
		}
		if !reads {
			// Dispatch may run fewer groups than asked for such a kernel:
			// one that does not loop over the grid would skip items.
			return bad("KernelSpec.GridStride is set, but the module does not read gl_NumWorkGroups: " +
				"a kernel that does not stride over the grid would leave items undone when Dispatch caps its groups")
		}
	}
	return nil
}

// SPIR-V decoration and built-in spirvReadsNumWorkgroups reads.
const (
	spvDecorationBuiltIn   = 11
	spvBuiltInNumWorkgroup = 24
)

// spirvReadsNumWorkgroups reports whether the module declares the
// NumWorkgroups built-in (gl_NumWorkGroups), which a grid-stride loop needs.
func spirvReadsNumWorkgroups(code []byte) (bool, error) {
	if _, err := spirvBindings(code); err != nil { // checks the header and the instruction stream
		return false, err
	}
	word := func(i int) uint32 { return binary.LittleEndian.Uint32(code[4*i:]) }
	n := len(code) / 4
	for i := spvHeaderWords; i < n; {
		w := word(i)
		op, count := w&0xffff, int(w>>16)
		if op == spvOpDecorate && count >= spvDecorateWordsMinLen &&
			word(i+2) == spvDecorationBuiltIn && word(i+3) == spvBuiltInNumWorkgroup {
			return true, nil
		}
		i += count
	}
	return false, nil
}

// SPIR-V opcodes and decorations spirvBindings reads.
const (
	spvOpDecorate          = 71
	spvDecorationBinding   = 33
	spvDecorationDescSet   = 34
	spvHeaderWords         = 5
	spvDecorateWordsMinLen = 4
)

// spirvBindings returns the sorted binding numbers of the module's
// variables in descriptor set 0 (a variable without a DescriptorSet
// decoration is in set 0).
func spirvBindings(code []byte) ([]uint32, error) {
	if len(code) < 4*spvHeaderWords || len(code)%4 != 0 {
		return nil, fmt.Errorf("%d bytes is not a SPIR-V module (a whole number of 32-bit words, at least a header)", len(code))
	}
	word := func(i int) uint32 { return binary.LittleEndian.Uint32(code[4*i:]) }
	if word(0) != spirvMagic {
		return nil, fmt.Errorf("not a little-endian SPIR-V module (magic %#08x)", word(0))
	}
	binding := map[uint32]uint32{}
	set := map[uint32]uint32{}
	n := len(code) / 4
	for i := spvHeaderWords; i < n; {
		w := word(i)
		op, count := w&0xffff, int(w>>16)
		if count == 0 || i+count > n {
			return nil, errors.New("truncated SPIR-V instruction stream")
		}
		if op == spvOpDecorate && count >= spvDecorateWordsMinLen {
			target, dec, val := word(i+1), word(i+2), word(i+3)
			switch dec {
			case spvDecorationBinding:
				binding[target] = val
			case spvDecorationDescSet:
				set[target] = val
			}
		}
		i += count
	}
	var out []uint32
	for id, bnd := range binding {
		if set[id] == 0 {
			out = append(out, bnd)
		}
	}
	slices.Sort(out)
	return out, nil
}

// SPIR-V opcodes, storage classes and decorations spirvPushConstantSize
// reads.
const (
	spvOpTypeBool          = 20
	spvOpTypeInt           = 21
	spvOpTypeFloat         = 22
	spvOpTypeVector        = 23
	spvOpTypeMatrix        = 24
	spvOpTypeArray         = 28
	spvOpTypeStruct        = 30
	spvOpTypePointer       = 32
	spvOpConstant          = 43
	spvOpVariable          = 59
	spvOpMemberDecorate    = 72
	spvStorageClassPush    = 9
	spvStorageClassPhysBuf = 5349
	spvDecorationRowMajor  = 4
	spvDecorationArrStride = 6
	spvDecorationMatStride = 7
	spvDecorationOffset    = 35
)

// spirvPushConstantSize returns the size of the module's push-constant
// block: the largest member offset plus that member's size (explicit
// layout, as a push_constant block always has), or 0 when the module
// declares none. A type it cannot size is an error.
func spirvPushConstantSize(code []byte) (uint32, error) {
	if _, err := spirvBindings(code); err != nil { // checks the header
		return 0, err
	}
	word := func(i int) uint32 { return binary.LittleEndian.Uint32(code[4*i:]) }
	type member struct{ struc, index uint32 }
	types := map[uint32][]uint32{} // id -> the instruction's words from the opcode on
	consts := map[uint32]uint32{}
	arrayStride := map[uint32]uint32{}
	offset := map[member]uint32{}
	matStride := map[member]uint32{}
	rowMajor := map[member]bool{}
	var blocks []uint32 // pointer types of push-constant variables
	n := len(code) / 4
	for i := spvHeaderWords; i < n; {
		w := word(i)
		op, count := w&0xffff, int(w>>16)
		if count == 0 || i+count > n {
			return 0, errors.New("truncated SPIR-V instruction stream")
		}
		ins := make([]uint32, count)
		for k := range ins {
			ins[k] = word(i + k)
		}
		switch op {
		case spvOpTypeBool, spvOpTypeInt, spvOpTypeFloat, spvOpTypeVector, spvOpTypeMatrix, spvOpTypeArray, spvOpTypeStruct, spvOpTypePointer:
			if count >= 2 {
				types[ins[1]] = ins
			}
		case spvOpConstant:
			if count >= 4 {
				consts[ins[2]] = ins[3]
			}
		case spvOpDecorate:
			if count >= 4 && ins[2] == spvDecorationArrStride {
				arrayStride[ins[1]] = ins[3]
			}
		case spvOpMemberDecorate:
			if count >= 4 {
				m := member{ins[1], ins[2]}
				switch ins[3] {
				case spvDecorationOffset:
					if count >= 5 {
						offset[m] = ins[4]
					}
				case spvDecorationMatStride:
					if count >= 5 {
						matStride[m] = ins[4]
					}
				case spvDecorationRowMajor:
					rowMajor[m] = true
				}
			}
		case spvOpVariable:
			if count >= 4 && ins[3] == spvStorageClassPush {
				blocks = append(blocks, ins[1])
			}
		}
		i += count
	}
	// size returns the bytes a value of type id takes; in is the struct
	// member it is (for a matrix's stride and order), depth bounds the
	// recursion of a malformed module.
	var size func(id uint32, in *member, depth int) (uint32, error)
	size = func(id uint32, in *member, depth int) (uint32, error) {
		t, ok := types[id]
		if !ok || depth > 32 {
			return 0, fmt.Errorf("the push-constant block uses type %%%d, which this reader cannot size", id)
		}
		switch t[0] & 0xffff {
		case spvOpTypeInt, spvOpTypeFloat:
			if len(t) < 3 {
				break
			}
			return t[2] / 8, nil
		case spvOpTypeVector:
			if len(t) < 4 {
				break
			}
			c, err := size(t[2], nil, depth+1)
			return c * t[3], err
		case spvOpTypeMatrix:
			if len(t) < 4 || in == nil || matStride[*in] == 0 {
				break
			}
			lines := t[3] // columns
			if rowMajor[*in] {
				col, ok := types[t[2]]
				if !ok || len(col) < 4 {
					break
				}
				lines = col[3] // rows
			}
			return lines * matStride[*in], nil
		case spvOpTypeArray:
			if len(t) < 4 {
				break
			}
			if l, ok := consts[t[3]]; ok && arrayStride[id] != 0 {
				return l * arrayStride[id], nil
			}
		case spvOpTypeStruct:
			var end uint32
			for k, mt := range t[2:] {
				m := member{id, uint32(k)}
				off, ok := offset[m]
				if !ok {
					return 0, fmt.Errorf("member %d of the push-constant block's struct %%%d has no Offset", k, id)
				}
				s, err := size(mt, &m, depth+1)
				if err != nil {
					return 0, err
				}
				end = max(end, off+s)
			}
			return end, nil
		case spvOpTypePointer:
			if len(t) >= 3 && t[2] == spvStorageClassPhysBuf {
				return 8, nil // a buffer reference is a 64-bit address
			}
		}
		return 0, fmt.Errorf("the push-constant block uses type %%%d (opcode %d), which this reader cannot size", id, t[0]&0xffff)
	}
	var block uint32
	for _, p := range blocks {
		pt, ok := types[p]
		if !ok || pt[0]&0xffff != spvOpTypePointer || len(pt) < 4 {
			return 0, fmt.Errorf("push-constant variable of type %%%d, not a pointer type", p)
		}
		s, err := size(pt[3], nil, 0)
		if err != nil {
			return 0, err
		}
		block = max(block, s)
	}
	return block, nil
}

// Close waits for the device to be idle (work may still use the pipeline)
// and destroys the kernel. Idempotent.
func (k *Kernel) Close() error {
	k.b.mu.Lock()
	_, live := k.b.kernels[k]
	closed := k.b.closed
	k.b.mu.Unlock()
	if !live || closed {
		return nil // closed before, or the backend's Close destroys it
	}
	err := k.b.dev.waitIdle()
	k.b.notePoison(err)
	k.destroy()
	k.b.mu.Lock()
	delete(k.b.kernels, k)
	k.b.mu.Unlock()
	return err
}

// destroy destroys whatever handles the kernel holds.
func (k *Kernel) destroy() {
	k.mu.Lock()
	defer k.mu.Unlock()
	d := k.b.dev
	if k.pipeline != 0 {
		vk.Call(d.fn.DestroyPipeline, d.h, uintptr(k.pipeline), 0)
	}
	if k.pipeLay != 0 {
		vk.Call(d.fn.DestroyPipelineLayout, d.h, uintptr(k.pipeLay), 0)
	}
	if k.setLay != 0 {
		vk.Call(d.fn.DestroyDescriptorSetLayout, d.h, uintptr(k.setLay), 0)
	}
	if k.module != 0 {
		vk.Call(d.fn.DestroyShaderModule, d.h, uintptr(k.module), 0)
	}
	k.pipeline, k.pipeLay, k.setLay, k.module = 0, 0, 0, 0
}
