package driver

// CUresult codes package cuda treats specially; the values are the driver's
// (cuda.h, enum cudaError_enum).
const (
	CodeSuccess                 = 0
	CodeInvalidValue            = 1
	CodeOutOfMemory             = 2
	CodeNotFound                = 500
	CodeNotReady                = 600
	CodeECCUncorrectable        = 214
	CodeIllegalAddress          = 700
	CodeAssert                  = 710
	CodeHardwareStackError      = 714 // 714..719: stack, instruction, alignment, address space, PC, launch failed
	CodeLaunchFailed            = 719
	CodeCaptureUnsupported      = 900
	CodeCaptureInvalidated      = 901
	CodeCaptureUnjoined         = 904
	CodeCapturedEvent           = 907
	CodeCaptureWrongThread      = 908
	CodeStreamCaptureModeThread = 1 // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
)
