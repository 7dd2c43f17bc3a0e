// Modules: device code of one's own, loaded into a primaryContext.
//
// An image is PTX text (JIT-compiled by the driver for the device), a cubin
// (ELF) or a fatbin; LoadModule tells them apart by their first bytes. It
// loads through cuModuleLoadDataEx with the JIT's error log buffer, then,
// for PTX, looks up every .entry of the text before returning, so a PTX the
// JIT refuses fails LoadModule with a *JITError carrying ptxas's messages
// (line numbers included), not a bare CUresult, and not later.
//
// Why not the library API (cuLibraryLoadData, CUDA 12.0+), where the driver
// has it: under lazy module loading, the default since CUDA 12.2
// (CUDA_MODULE_LOADING unset or LAZY), cuLibraryLoadData loads nothing
// into any context; the JIT, and its refusal, happen at the first kernel
// lookup in a context, after the load's log buffer is gone. A CUDA 13.0
// driver (580.159.04, H200) accepted a PTX whose body is never closed that
// way. cuModuleLoadDataEx loads the module into the current context in the
// call (lazy loading defers only each kernel's upload to its lookup, which
// LoadModule makes for every PTX entry while the log buffer is still
// there). The log buffer stays referenced by the Module until Unload, in
// case a driver writes to it on a later lazy load.
//
// A Function knows its parameters' sizes where that can be learnt: from the
// driver (cuFuncGetParamInfo, CUDA 12.4+), else, for a PTX image, from the
// entry's .param list. driverStream.Launch and Op.Launch refuse arguments that do
// not match them, because the driver itself reads as many parameter bytes
// as the kernel declares, whatever the caller passed.
//
// Lifetime: a Module lives until Unload (or primaryContext.Close); there is no
// finalizer, so an unloaded Module is a leak the caller chose, visible in
// the driver's memory, never a surprise unload under a running kernel.

package cuda

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/gpumem/gpumem/cuda/internal/driver"
	"github.com/gpumem/gpumem/stream"
)

// ImageKind is what a module image holds.
type ImageKind int

const (
	ImagePTX    ImageKind = iota // PTX text, JIT-compiled at load
	ImageCubin                   // an ELF cubin for one architecture
	ImageFatbin                  // a fat binary (cubins and PTX for several)
)

func (k ImageKind) String() string {
	switch k {
	case ImagePTX:
		return "PTX"
	case ImageCubin:
		return "cubin"
	case ImageFatbin:
		return "fatbin"
	}
	return "ImageKind(" + strconv.Itoa(int(k)) + ")"
}

// Magic numbers of the binary images: a cubin is an ELF file; a fatbin
// starts with 0xBA55ED50 (fatBinaryMagic, little-endian on disk), a
// fatbin wrapper with 0x466243B1.
var (
	elfMagic     = []byte{0x7f, 'E', 'L', 'F'}
	fatbinMagic  = []byte{0x50, 0xed, 0x55, 0xba}
	wrapperMagic = []byte{0xb1, 0x43, 0x62, 0x46}
)

// KindOf returns the kind of a module image: cubin or fatbin by their magic
// numbers, else PTX.
func KindOf(image []byte) ImageKind {
	switch {
	case bytes.HasPrefix(image, elfMagic):
		return ImageCubin
	case bytes.HasPrefix(image, fatbinMagic), bytes.HasPrefix(image, wrapperMagic):
		return ImageFatbin
	}
	return ImagePTX
}

// CUjit_option values (cuda.h) and the size of the error log asked for:
// ptxas stops at a few errors, each a line, so 16 KiB holds any real log.
const (
	jitErrorLogBuffer          = 5 // CU_JIT_ERROR_LOG_BUFFER: char*
	jitErrorLogBufferSizeBytes = 6 // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: unsigned int, in and out
	jitLogSize                 = 16 << 10
)

// JITError is a module image the driver refused: the failed call (Err, a
// *DriverError: CUDA_ERROR_INVALID_PTX 218 for PTX that does not compile,
// CUDA_ERROR_INVALID_IMAGE 200 for a damaged binary,
// CUDA_ERROR_NO_BINARY_FOR_GPU 209 for a cubin of another architecture;
// Err.Op names the call, cuModuleLoadDataEx or the cuModuleGetFunction of
// an entry) and the JIT's error log (Log; may be empty for binary images).
// Fix the source at the lines the log names. LoadModule returns it; so
// does Function when the driver refuses the image only at the lookup (a
// binary image's kernel loaded lazily).
type JITError struct {
	Kind ImageKind
	Err  *DriverError
	Log  string
}

func (e *JITError) Error() string {
	if e.Log == "" {
		return fmt.Sprintf("cuda: loading a %s module: %v (the driver gave no log)", e.Kind, e.Err)
	}
	return fmt.Sprintf("cuda: loading a %s module: %v; JIT log:\n%s", e.Kind, e.Err, e.Log)
}

// Unwrap returns the driver error, so errors.As finds the *DriverError
// and errors.Is its classes.
func (e *JITError) Unwrap() error { return e.Err }

// Module is a loaded image, a CUmodule of the context. Its methods are
// safe for concurrent use; Unload releases it, and nothing else does but
// primaryContext.Close.
type Module struct {
	c    *primaryContext
	kind ImageKind
	ptx  map[string][]uintptr // parameter sizes by entry, from the PTX; nil for binaries
	mu   sync.Mutex           // guards h and jit; held across each driver call using them or its functions
	h    uintptr              // CUmodule; 0 once unloaded
	jit  *jitOptions          // the load's JIT options and log buffer, kept until Unload
}

// jitOptions are the JIT options a module was loaded with: the error log
// buffer and its size. The driver reads them during the load; they stay
// referenced by the Module until Unload so that the memory is still there
// should a driver use them again for a kernel it loads lazily.
type jitOptions struct {
	opts []int32
	vals []uintptr
	log  []byte
}

func newJITOptions() *jitOptions {
	j := &jitOptions{log: make([]byte, jitLogSize)}
	j.opts = []int32{jitErrorLogBuffer, jitErrorLogBufferSizeBytes}
	j.vals = []uintptr{uintptr(unsafe.Pointer(&j.log[0])), uintptr(len(j.log))}
	return j
}

// text returns the log the driver wrote (up to its NUL), trimmed.
func (j *jitOptions) text() string {
	n := bytes.IndexByte(j.log, 0)
	if n < 0 {
		n = len(j.log)
	}
	return strings.TrimSpace(string(j.log[:n]))
}

// jitRefusal reports whether a failed lookup's code says the driver refused
// the image itself (loading it lazily): INVALID_IMAGE 200, NO_BINARY_FOR_GPU
// 209, INVALID_PTX 218, JIT_COMPILER_NOT_FOUND 221, UNSUPPORTED_PTX_VERSION
// 222, JIT_COMPILATION_DISABLED 223.
func jitRefusal(code int) bool {
	switch code {
	case 200, 209, 218, 221, 222, 223:
		return true
	}
	return false
}

// Function is a kernel of a Module. It stays valid until the module is
// unloaded; a launch after that fails with ErrClosed.
type Function struct {
	m    *Module
	h    uintptr // CUfunction
	name string

	// params holds the C size of each kernel parameter when known;
	// paramsFrom says who told (cuFuncGetParamInfo or the PTX), "" when
	// nobody could.
	params     []uintptr
	paramsFrom string
}

// maxKernelParams bounds the probe for a kernel's parameters (the driver
// allows 4 KiB of them before CUDA 12.1, 32 KiB after: at least a byte each).
const maxKernelParams = 32764

// LoadModule loads a module image (see KindOf): PTX text, a cubin or a
// fatbin, through cuModuleLoadDataEx on the device executor. PTX need not
// end in a NUL (a copy with one is passed); binaries are passed as they
// are, and the driver reads their length from their headers. For PTX it
// then looks up every .entry the text declares (cuModuleGetFunction), so
// that the JIT has run, and refused, before LoadModule returns, whatever
// the driver's module loading mode. A refusal is a *JITError with the
// JIT's log, and nothing stays loaded. Unload the module when done:
// nothing unloads it for you before primaryContext.Close.
func (c *primaryContext) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, fmt.Errorf("cuda: load module: empty image: %w", stream.ErrInvalid)
	}
	kind := KindOf(image)
	m := &Module{c: c, kind: kind, jit: newJITOptions()}
	img := image
	var entries [][]byte
	if kind == ImagePTX {
		if i := bytes.IndexByte(image, 0); i >= 0 {
			image = image[:i] // the driver stops at the first NUL too
		}
		img = append(append(make([]byte, 0, len(image)+1), image...), 0)
		m.ptx = ptxParams(string(image))
		for _, name := range ptxEntries(string(image)) {
			entries = append(entries, driver.CStringBytes(name))
		}
	}

	j := m.jit
	var pin runtime.Pinner
	pin.Pin(&j.log[0])
	pin.Pin(&img[0])
	defer pin.Unpin()

	d := c.drv
	var refused error
	err := c.do(func() error {
		if err := d.check("cuModuleLoadDataEx", d.CuModuleLoadDataEx(&m.h, unsafe.Pointer(&img[0]), uint32(len(j.opts)), &j.opts[0], &j.vals[0])); err != nil {
			m.h = 0
			refused = err
			return nil
		}
		for _, name := range entries {
			var fn uintptr
			rc := d.CuModuleGetFunction(&fn, m.h, &name[0])
			if rc == driver.CodeSuccess || rc == driver.CodeNotFound {
				continue // not found: an .entry the scan misread; Function will say
			}
			refused = d.check("cuModuleGetFunction", rc)
			d.CuModuleUnload(m.h)
			m.h = 0
			return nil
		}
		return nil
	})
	runtime.KeepAlive(j)
	if err != nil {
		return nil, fmt.Errorf("cuda: load module: %w", err)
	}
	if refused != nil {
		return nil, &JITError{Kind: kind, Err: refused.(*DriverError), Log: j.text()}
	}
	return m, nil
}

// Kind returns the kind of image the module was loaded from.
func (m *Module) Kind() ImageKind { return m.kind }

// use calls fn with m's handle, holding m.mu so that Unload cannot unload
// it under the call, or fails when m is unloaded.
func (m *Module) use(fn func(h uintptr) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.h == 0 {
		return fmt.Errorf("%w: module unloaded", ErrClosed)
	}
	return fn(m.h)
}

// Function looks up a kernel entry by name (cuModuleGetFunction) and its
// parameters' sizes (cuFuncGetParamInfo where the driver has it, else the
// PTX's .param list). The name is the entry's symbol: a C++ kernel's
// mangled name unless it was declared extern "C". A missing entry is a
// *DriverError of code 500 (CUDA_ERROR_NOT_FOUND). Where the driver loads
// a binary image's kernel only now and refuses it (a code of JITError's),
// the error is a *JITError with the load's log.
func (m *Module) Function(name string) (*Function, error) {
	f := &Function{m: m, name: name}
	n := driver.CStringBytes(name)
	d := m.c.drv
	err := m.c.do(func() error {
		return m.use(func(h uintptr) error {
			if err := d.check("cuModuleGetFunction", d.CuModuleGetFunction(&f.h, h, &n[0])); err != nil {
				if de := err.(*DriverError); jitRefusal(de.Code) {
					return &JITError{Kind: m.kind, Err: de, Log: m.jit.text()}
				}
				return err
			}
			if sizes, ok := probeParams(d, f.h); ok {
				f.params, f.paramsFrom = sizes, "cuFuncGetParamInfo"
			} else if sizes, ok := m.ptx[name]; ok {
				f.params, f.paramsFrom = sizes, "the PTX"
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: kernel %q: %w", name, err)
	}
	return f, nil
}

// probeParams asks the driver for fn's parameter sizes, index by index,
// until it answers CUDA_ERROR_INVALID_VALUE (no such parameter). Without
// the symbol, or on any other answer, the parameters stay unknown.
func probeParams(d *cudaDriver, fn uintptr) ([]uintptr, bool) {
	if d.CuFuncGetParamInfo == nil {
		return nil, false
	}
	sizes := []uintptr{}
	for i := uintptr(0); i <= maxKernelParams; i++ {
		var off, size uintptr
		switch rc := d.CuFuncGetParamInfo(fn, i, &off, &size); rc {
		case driver.CodeSuccess:
			sizes = append(sizes, size)
		case driver.CodeInvalidValue:
			return sizes, true
		default:
			return nil, false
		}
	}
	return nil, false
}

// Params returns the C size of each of the kernel's parameters, and whether
// they are known (from the driver or the PTX). When they are not (a cubin
// on a driver before CUDA 12.4), launches are not checked: the caller must
// match the kernel's signature exactly.
func (f *Function) Params() (sizes []uintptr, known bool) {
	return append([]uintptr(nil), f.params...), f.paramsFrom != ""
}

// checkParams refuses arguments of the given C sizes that do not match the
// kernel's parameters, when they are known.
func (f *Function) checkParams(sizes []uintptr) error {
	if f.paramsFrom == "" {
		return nil
	}
	if len(sizes) != len(f.params) {
		return &ArgError{Kernel: f.name, Index: -1,
			Reason: fmt.Sprintf("%d arguments for a kernel of %d parameters (per %s)", len(sizes), len(f.params), f.paramsFrom)}
	}
	for i, want := range f.params {
		if sizes[i] != want {
			return &ArgError{Kernel: f.name, Index: i,
				Reason: fmt.Sprintf("%d bytes, the kernel's parameter is %d bytes (per %s)", sizes[i], want, f.paramsFrom)}
		}
	}
	return nil
}

// Unload unloads the module (cuModuleUnload); its Functions become
// invalid (launching one fails with ErrClosed). Unload only once the work that launched them has completed and every graph that
// captured them is closed: the driver does not keep the code alive for
// them. Idempotent; after primaryContext.Close the module is already gone and
// Unload does nothing.
func (m *Module) Unload() error {
	m.mu.Lock()
	h := m.h
	m.h = 0
	m.mu.Unlock()
	if h == 0 {
		return nil
	}
	err := m.c.cleanup(func() error {
		return m.c.drv.check("cuModuleUnload", m.c.drv.CuModuleUnload(h))
	})
	m.mu.Lock()
	m.jit = nil // the driver is done with the load's options
	m.mu.Unlock()
	return err
}

// Name returns the kernel's entry name.
func (f *Function) Name() string { return f.name }

// ptxParams reads the parameter sizes of every .entry in PTX source whose
// .param list it understands; an entry with a parameter it does not (an
// unknown type) is left out, so its launches go unchecked rather than
// wrongly refused.
func ptxParams(src string) map[string][]uintptr {
	src = stripPTXComments(src)
	out := make(map[string][]uintptr)
	const kw = ".entry"
	for rest := src; ; {
		i := strings.Index(rest, kw)
		if i < 0 {
			return out
		}
		rest = rest[i+len(kw):]
		if rest == "" || !isPTXSpace(rest[0]) {
			continue
		}
		rest = strings.TrimLeft(rest, " \t\r\n")
		j := strings.IndexAny(rest, " \t\r\n({")
		if j <= 0 {
			continue
		}
		name := rest[:j]
		rest = strings.TrimLeft(rest[j:], " \t\r\n")
		if !strings.HasPrefix(rest, "(") {
			out[name] = []uintptr{} // no parameter list: no parameters
			continue
		}
		end := strings.IndexByte(rest, ')')
		if end < 0 {
			return out
		}
		if sizes, ok := ptxParamList(rest[1:end]); ok {
			out[name] = sizes
		}
		rest = rest[end:]
	}
}

// ptxEntries returns the name of every .entry in PTX source, in order,
// comments aside.
func ptxEntries(src string) []string {
	src = stripPTXComments(src)
	var out []string
	const kw = ".entry"
	for rest := src; ; {
		i := strings.Index(rest, kw)
		if i < 0 {
			return out
		}
		rest = rest[i+len(kw):]
		if rest == "" || !isPTXSpace(rest[0]) {
			continue
		}
		rest = strings.TrimLeft(rest, " \t\r\n")
		j := strings.IndexAny(rest, " \t\r\n({")
		if j < 0 {
			j = len(rest)
		}
		if j > 0 {
			out = append(out, rest[:j])
		}
	}
}

// ptxParamList parses ".param .u64 a, .param .align 8 .b8 s[16]" into
// sizes (8, 16).
func ptxParamList(list string) ([]uintptr, bool) {
	sizes := []uintptr{}
	if strings.TrimSpace(list) == "" {
		return sizes, true
	}
	for _, decl := range strings.Split(list, ",") {
		f := strings.Fields(decl)
		if len(f) < 3 || f[0] != ".param" {
			return nil, false
		}
		var elem uintptr
		k := 1
		for ; k < len(f)-1; k++ {
			switch tok := f[k]; tok {
			case ".align":
				k++ // its value
			case ".ptr", ".global", ".const", ".shared", ".local":
			default:
				w, ok := ptxTypeSize(tok)
				if !ok {
					return nil, false
				}
				elem = w
			}
		}
		if elem == 0 || k != len(f)-1 {
			return nil, false
		}
		count := uintptr(1)
		if name := f[k]; strings.HasSuffix(name, "]") {
			open := strings.IndexByte(name, '[')
			n, err := strconv.ParseUint(name[open+1:len(name)-1], 10, 32)
			if open < 0 || err != nil || n == 0 {
				return nil, false
			}
			count = uintptr(n)
		}
		sizes = append(sizes, elem*count)
	}
	return sizes, true
}

// ptxTypeSize returns the byte size of a PTX fundamental type (.u8 … .f64).
func ptxTypeSize(tok string) (uintptr, bool) {
	if len(tok) < 3 || tok[0] != '.' || !strings.ContainsRune("usbf", rune(tok[1])) {
		return 0, false
	}
	switch tok[2:] {
	case "8":
		return 1, tok[1] != 'f'
	case "16":
		return 2, true
	case "32":
		return 4, true
	case "64":
		return 8, true
	}
	return 0, false
}

func isPTXSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// stripPTXComments blanks // and /* */ comments, so a commented-out entry
// is not read as one.
func stripPTXComments(src string) string {
	var b strings.Builder
	for i := 0; i < len(src); i++ {
		switch {
		case strings.HasPrefix(src[i:], "//"):
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				return b.String()
			}
			i += j - 1
		case strings.HasPrefix(src[i:], "/*"):
			j := strings.Index(src[i+2:], "*/")
			if j < 0 {
				return b.String()
			}
			i += j + 3
			b.WriteByte(' ')
		default:
			b.WriteByte(src[i])
		}
	}
	return b.String()
}
