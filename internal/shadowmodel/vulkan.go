package shadowmodel

import (
	"fmt"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/vulkan"
)

// VulkanTarget runs one script on backend b: its Open opens the one
// device b serves (Device.Close closes b), and its Rotate records the
// graph's rotation as device copies (vulkan.Op.Copy).
func VulkanTarget(b *vulkan.Backend) Target {
	opened := false
	return Target{
		Open: func(opts ...gpumem.Option) (*gpumem.Device, error) {
			if opened {
				return nil, fmt.Errorf("%w: the shadow model opened a second device on one vulkan backend", gpumem.ErrInvalidUse)
			}
			opened = true
			return gpumem.OpenBackend(b, opts...)
		},
		Rotate: vulkanRotate,
	}
}

// vulkanRotate is Target.Rotate on Vulkan: device copies, so a capture
// records them.
func vulkanRotate(s *gpumem.Stream, name string, uses []gpumem.Use, n, rot, tmp uint64) error {
	return vulkan.Enqueue(s, name, uses, func(op *vulkan.Op) error {
		// uses[1] = uses[0][rot:] ++ uses[0][:rot]
		if err := op.Copy(vulkan.UseRange(1, 0, n-rot), vulkan.UseRange(0, rot, n-rot)); err != nil {
			return err
		}
		if err := op.Copy(vulkan.UseRange(1, n-rot, rot), vulkan.UseRange(0, 0, rot)); err != nil {
			return err
		}
		if tmp > 0 && len(uses) > 2 {
			return op.Copy(vulkan.UseRange(2, 0, tmp), vulkan.UseRange(0, 0, tmp))
		}
		return nil
	})
}
