// The copy queue: how a relocation's bytes travel (design §7.1, §9.3). The
// protocol around it is described in doc.go.

package relocation

import (
	"errors"
	"fmt"

	"github.com/gpumem/gpumem/internal/hoststorage"
	"github.com/gpumem/gpumem/storage"
)

// ErrSizeMismatch is returned by HostCopies.Copy when the source and target
// windows differ in size: copying would either lose bytes or write past the
// target slice. A planner that made such a copy has a bug; NewMove panics on
// it.
var ErrSizeMismatch = errors.New("relocation: copy source and target sizes differ")

// CopyQueue carries a relocation's copies. Relocation.Copy calls WaitDevice
// once, then Copy for each move, then WaitCopies once, even after a refused
// Copy (design §7.3).
type CopyQueue interface {
	// WaitDevice returns once every stream's work and driver work outside
	// streams is done, so no byte moves under a reader or writer (R1). On
	// error nothing was enqueued.
	WaitDevice() error
	// Copy enqueues c: Source's bytes into Target. It may batch; the bytes
	// are guaranteed in place only after WaitCopies returns nil. An error
	// means c was not enqueued.
	Copy(st storage.Storage, c StorageCopy) error
	// WaitCopies submits what Copy held and waits until every enqueued copy
	// has landed. An error leaves it unknown whether they did, unless it
	// wraps storage.ErrDevicePoisoned.
	WaitCopies() error
}

// HostCopies is the copy queue for pools used directly, with nothing else
// running against the memory: its waits have nothing to wait for, and Copy
// copies at once. With Sim storage (no bytes) Copy only checks that both
// windows resolve and have equal sizes.
//
// The zero value is ready to use. Faults, when set, is consulted before every
// wait and copy so tests reach the failure paths of Relocation.Copy through
// hoststorage.Faulty instead of mocks; when it is nil, a storage passed to Copy
// that implements hoststorage.FaultInjector is consulted for copies (waits take
// no storage, so only Faults can refuse them).
type HostCopies struct {
	Faults hoststorage.FaultInjector
}

// WaitDevice implements CopyQueue: nothing runs against the memory, so it
// only asks Faults.
func (h HostCopies) WaitDevice() error { return h.checkWait() }

// WaitCopies implements CopyQueue: every copy already landed in Copy, so it
// only asks Faults.
func (h HostCopies) WaitCopies() error { return h.checkWait() }

// Copy implements CopyQueue: it resolves both windows and copies Source's
// bytes into Target at once, exactly c.Source.Size bytes and nothing beyond.
// It returns the refusal of the fault injector, a resolve error
// (storage.ErrUnknownRegion) or ErrSizeMismatch, and on error writes nothing.
func (h HostCopies) Copy(st storage.Storage, c StorageCopy) error {
	faults := h.Faults
	if faults == nil {
		faults, _ = st.(hoststorage.FaultInjector)
	}
	if faults != nil {
		if err := faults.CheckCopy(); err != nil {
			return fmt.Errorf("relocation: host copy refused: %w", err)
		}
	}
	if c.Source.Size != c.Target.Size {
		return fmt.Errorf("%w: source %d bytes, target %d bytes", ErrSizeMismatch, c.Source.Size, c.Target.Size)
	}
	src, err := st.Resolve(c.Source)
	if err != nil {
		return fmt.Errorf("relocation: resolving copy source (allocation %d): %w", c.Source.ID, err)
	}
	dst, err := st.Resolve(c.Target)
	if err != nil {
		return fmt.Errorf("relocation: resolving copy target (allocation %d): %w", c.Target.ID, err)
	}
	if len(src.Bytes) != len(dst.Bytes) {
		// A storage whose windows are not exactly the requested size broke
		// its Resolve contract; copying would silently truncate.
		return fmt.Errorf("%w: source resolves to %d bytes, target to %d bytes", ErrSizeMismatch, len(src.Bytes), len(dst.Bytes))
	}
	copy(dst.Bytes, src.Bytes)
	return nil
}

func (h HostCopies) checkWait() error {
	if h.Faults == nil {
		return nil
	}
	if err := h.Faults.CheckWait(); err != nil {
		return fmt.Errorf("relocation: host copy wait refused: %w", err)
	}
	return nil
}
