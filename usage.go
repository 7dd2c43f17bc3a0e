package gpumem

import "github.com/gpumem/gpumem/storage"

// BytesAllocated is the bytes every stream's storage holds from the device:
// cheap (no report is built), for callers that sample it often.
func (d *Device) BytesAllocated() uint64 {
	borrowed := d.lockOrBorrow()
	defer d.unlock(borrowed)
	var n uint64
	for _, s := range d.streams {
		n = storage.SatAdd(n, s.mem.BytesAllocated())
	}
	return n
}
