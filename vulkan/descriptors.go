// Descriptor sets for dispatches: allocated per dispatch from the queue's
// pools, freed when the step that used them completed (V2 in queue.go).

package vulkan

import (
	"fmt"
	"unsafe"

	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// Sizes of each descriptor pool a queue makes; another is made when one is
// full.
const (
	poolSets        = 64
	poolDescriptors = 64 * 8
)

type descriptorPool struct {
	h uint64
}

type descriptorSet struct {
	pool *descriptorPool
	h    uint64
}

// allocSetLocked allocates a set of layout from the newest pool, making a
// pool when there is none or it is exhausted.
func (q *queue) allocSetLocked(layout uint64) (descriptorSet, error) {
	d := q.b.dev
	lays := []uint64{layout}
	try := func(p *descriptorPool) (descriptorSet, int32) {
		ai := &vk.DescriptorSetAllocateInfo{SType: vk.StDescriptorSetAllocateInfo, DescriptorPool: p.h, DescriptorSetCount: 1, PSetLayouts: unsafe.Pointer(&lays[0])}
		var h uint64
		r := vk.Call(d.fn.AllocateDescriptorSets, d.h, uintptr(unsafe.Pointer(ai)), uintptr(unsafe.Pointer(&h)))
		return descriptorSet{pool: p, h: h}, r
	}
	if n := len(q.descPool); n > 0 {
		s, r := try(q.descPool[n-1])
		if r == vk.Success {
			return s, nil
		}
		if r != vk.ErrorOutOfPoolMemory && r != vk.ErrorFragmentedPool {
			err := check("vkAllocateDescriptorSets", r)
			q.b.notePoison(err)
			return descriptorSet{}, fmt.Errorf("vulkan: stream %d: %w", q.index, err)
		}
	}
	sizes := []vk.DescriptorPoolSize{{Type: vk.DescriptorTypeStorageBuffer, DescriptorCount: poolDescriptors}}
	pci := &vk.DescriptorPoolCreateInfo{SType: vk.StDescriptorPoolCreateInfo, Flags: vk.DescriptorPoolFreeDescriptor, MaxSets: poolSets,
		PoolSizeCount: 1, PPoolSizes: unsafe.Pointer(&sizes[0])}
	p := &descriptorPool{}
	if err := check("vkCreateDescriptorPool", vk.Call(d.fn.CreateDescriptorPool, d.h, uintptr(unsafe.Pointer(pci)), 0, uintptr(unsafe.Pointer(&p.h)))); err != nil {
		q.b.notePoison(err)
		return descriptorSet{}, fmt.Errorf("vulkan: stream %d: %w", q.index, err)
	}
	q.descPool = append(q.descPool, p)
	s, r := try(p)
	if err := check("vkAllocateDescriptorSets", r); err != nil {
		q.b.notePoison(err)
		return descriptorSet{}, fmt.Errorf("vulkan: stream %d: %w", q.index, err)
	}
	return s, nil
}

// freeSetsLocked gives sets back to their pools.
func (q *queue) freeSetsLocked(sets []descriptorSet) {
	d := q.b.dev
	for _, s := range sets {
		h := s.h
		vk.Call(d.fn.FreeDescriptorSets, d.h, uintptr(s.pool.h), 1, uintptr(unsafe.Pointer(&h)))
	}
}
