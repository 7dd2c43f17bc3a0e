//go:build !linux

package vulkan

import "github.com/gpumem/gpumem/internal/dl"

// mappedLibraries refuses: no driver is loaded here.
func mappedLibraries() (map[string]bool, error) { return nil, dl.ErrUnsupportedOS }

// keepLoaded keeps nothing: no driver is loaded here.
func keepLoaded(string) bool { return false }
