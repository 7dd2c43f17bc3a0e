// Loading: the loader library, once per process and path, with its global
// functions (the tables and the calls are package vulkan/internal/vk's).
//
// Every Vulkan function but the loader's few global ones is reached through
// vkGetInstanceProcAddr / vkGetDeviceProcAddr, as the loader's dispatch
// wants (a device function from vkGetDeviceProcAddr skips the loader's
// trampoline). A table is a struct of uintptr fields named as the function
// without its "vk" prefix, filled by name (vk.FillTable); a missing
// required function is an error naming it, never a nil call.

package vulkan

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// EnvLibrary names the environment variable that overrides the loader's
// path (Options.Library first).
const EnvLibrary = "GPUMEM_LIBVULKAN"

// library is a loaded Vulkan loader.
type library struct {
	path                string
	getInstanceProcAddr uintptr
	global              vk.GlobalFuncs
}

// libraries are the loaders loaded so far, by path: each is loaded and
// its global functions looked up once per process (never closed, as
// vk.LoadLibrary says).
var (
	librariesMu sync.Mutex
	libraries   = make(map[string]*library)
)

// openLibrary loads the loader at path ("" = $GPUMEM_LIBVULKAN, else
// libvulkan.so.1), once per process and path. Errors wrap ErrNoLoader and
// say what to install; a path that failed is tried again at the next call.
func openLibrary(path string) (*library, error) {
	if path == "" {
		path = os.Getenv(EnvLibrary)
	}
	if path == "" {
		path = vk.DefaultLibrary
	}
	librariesMu.Lock()
	defer librariesMu.Unlock()
	if l, ok := libraries[path]; ok {
		return l, nil
	}
	l, err := loadLoader(path)
	if err != nil {
		return nil, err
	}
	libraries[path] = l
	return l, nil
}

// loadLoader loads the loader at path and looks up its global functions.
func loadLoader(path string) (*library, error) {
	h, err := vk.LoadLibrary(path)
	if err != nil {
		return nil, fmt.Errorf("%w: loading %s: %v (install libvulkan1 and a driver, e.g. mesa-vulkan-drivers; or set %s)",
			ErrNoLoader, path, err, EnvLibrary)
	}
	l := &library{path: path, getInstanceProcAddr: vk.LookupSymbol(h, "vkGetInstanceProcAddr")}
	if l.getInstanceProcAddr == 0 {
		return nil, fmt.Errorf("%w: %s has no vkGetInstanceProcAddr (not a Vulkan loader?)", ErrNoLoader, path)
	}
	if err := vk.FillTable(&l.global, func(name string) uintptr { return l.instanceProc(0, name) }); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoLoader, path, err)
	}
	return l, nil
}

// instanceProc is vkGetInstanceProcAddr(inst, name).
func (l *library) instanceProc(inst uintptr, name string) uintptr {
	b := vk.CString(name)
	return uintptr(vk.Call64(l.getInstanceProcAddr, inst, uintptr(unsafe.Pointer(&b[0]))))
}
