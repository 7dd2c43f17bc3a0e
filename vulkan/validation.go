// Validation: the Khronos layer's messages, collected through a
// VK_EXT_debug_utils messenger, so that tests fail on any of them.

package vulkan

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/gpumem/gpumem/vulkan/internal/vk"
)

// validationLog keeps the messages of one instance's messenger.
type validationLog struct {
	id        uintptr // the key in logs, passed to the callback as pUserData
	messenger uint64

	mu   sync.Mutex
	msgs []string
}

// The messenger callback is a C function pointer made once per process
// (purego callbacks are a limited resource and are never freed), so it
// cannot close over a log: it finds its log by the pUserData key in logs.
// This registry is process state, kept because the C callback has no other
// way back to Go (the package's other process state: the loaders loaded,
// loader.go, and the drivers kept loaded, instance.go).
var (
	callbackOnce sync.Once
	callbackPtr  uintptr
	logs         sync.Map // uintptr -> *validationLog
	nextLogID    atomic.Uintptr
)

func messengerCallback() uintptr {
	callbackOnce.Do(func() {
		callbackPtr = purego.NewCallback(func(severity uint32, types uint32, data *vk.DebugUtilsMessengerCallbackDataEXT, user uintptr) uintptr {
			v, ok := logs.Load(user)
			if !ok || data == nil {
				return 0
			}
			l := v.(*validationLog)
			msg := fmt.Sprintf("%s [%s] %s", severityName(severity), vk.CStringAt(data.PMessageIdName), vk.CStringAt(data.PMessage))
			l.mu.Lock()
			l.msgs = append(l.msgs, msg)
			l.mu.Unlock()
			return 0 // VK_FALSE: the call that triggered the message goes on
		})
	})
	return callbackPtr
}

func severityName(s uint32) string {
	switch {
	case s&vk.DebugSeverityError != 0:
		return "error"
	case s&vk.DebugSeverityWarning != 0:
		return "warning"
	case s&vk.DebugSeverityInfo != 0:
		return "info"
	}
	return "verbose"
}

func newValidationLog() *validationLog {
	l := &validationLog{id: nextLogID.Add(1)}
	logs.Store(l.id, l)
	return l
}

// createInfo is the messenger's create info: warnings and errors of the
// general, validation and performance kinds. Performance warnings count:
// the backend should not trip them either.
func (l *validationLog) createInfo() *vk.DebugUtilsMessengerCreateInfoEXT {
	return &vk.DebugUtilsMessengerCreateInfoEXT{
		SType:           vk.StDebugUtilsMessengerCreateInfoEXT,
		MessageSeverity: vk.DebugSeverityWarning | vk.DebugSeverityError,
		MessageType:     vk.DebugTypeGeneral | vk.DebugTypeValidation | vk.DebugTypePerformance,
		PfnUserCallback: messengerCallback(),
		PUserData:       l.id,
	}
}

// attach creates the instance's messenger.
func (l *validationLog) attach(inst *instance) error {
	if inst.fn.CreateDebugUtilsMessengerEXT == 0 {
		return fmt.Errorf("%w: the loader gives no vkCreateDebugUtilsMessengerEXT", ErrUnsupported)
	}
	ci := l.createInfo()
	return check("vkCreateDebugUtilsMessengerEXT", vk.Call(inst.fn.CreateDebugUtilsMessengerEXT, inst.h,
		uintptr(unsafe.Pointer(ci)), 0, uintptr(unsafe.Pointer(&l.messenger))))
}

func (l *validationLog) detach(inst *instance) {
	if l.messenger != 0 && inst.fn.DestroyDebugUtilsMessengerEXT != 0 {
		vk.Call(inst.fn.DestroyDebugUtilsMessengerEXT, inst.h, uintptr(l.messenger), 0)
		l.messenger = 0
	}
}

// close stops collecting (after the instance is gone). Nil-safe.
func (l *validationLog) close() {
	if l != nil {
		logs.Delete(l.id)
	}
}

// messages returns a copy of the messages so far. Nil-safe.
func (l *validationLog) messages() []string {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}
