// Descriptor sets for dispatches: allocated per dispatch from the queue's
// pools, freed when the step that used them completed (V2 in queue.go).

package vulkan

import (
	"fmt"
	"unsafe"
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
func (q *Queue) allocSetLocked(layout uint64) (descriptorSet, error) {
	d := q.b.dev
	lays := []uint64{layout}
	try := func(p *descriptorPool) (descriptorSet, int32) {
		ai := &vkDescriptorSetAllocateInfo{SType: stDescriptorSetAllocateInfo, DescriptorPool: p.h, DescriptorSetCount: 1, PSetLayouts: unsafe.Pointer(&lays[0])}
		var h uint64
		r := call(d.fn.AllocateDescriptorSets, d.h, uintptr(unsafe.Pointer(ai)), uintptr(unsafe.Pointer(&h)))
		return descriptorSet{pool: p, h: h}, r
	}
	if n := len(q.descPool); n > 0 {
		s, r := try(q.descPool[n-1])
		if r == vkSuccess {
			return s, nil
		}
		if r != vkErrOutOfPoolMemory && r != vkErrFragmentedPool {
			err := check("vkAllocateDescriptorSets", r)
			q.b.notePoison(err)
			return descriptorSet{}, fmt.Errorf("vulkan: stream %d: %w", q.index, err)
		}
	}
	sizes := []vkDescriptorPoolSize{{Type: descriptorTypeStorageBuffer, DescriptorCount: poolDescriptors}}
	pci := &vkDescriptorPoolCreateInfo{SType: stDescriptorPoolCreateInfo, Flags: descriptorPoolFreeDescriptor, MaxSets: poolSets,
		PoolSizeCount: 1, PPoolSizes: unsafe.Pointer(&sizes[0])}
	p := &descriptorPool{}
	if err := check("vkCreateDescriptorPool", call(d.fn.CreateDescriptorPool, d.h, uintptr(unsafe.Pointer(pci)), 0, uintptr(unsafe.Pointer(&p.h)))); err != nil {
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
func (q *Queue) freeSetsLocked(sets []descriptorSet) {
	d := q.b.dev
	for _, s := range sets {
		h := s.h
		call(d.fn.FreeDescriptorSets, d.h, uintptr(s.pool.h), 1, uintptr(unsafe.Pointer(&h)))
	}
}
