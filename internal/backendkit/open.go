package backendkit

import (
	"errors"

	"github.com/gpumem/gpumem"
)

// OpenDevice opens a gpumem.Device on b, the backend a NewBackend returned
// with err, with more: err as it is, else gpumem.OpenBackend's, with the
// backend closed when the device does not open.
func OpenDevice(b gpumem.Backend, err error, more []gpumem.Option) (*gpumem.Device, error) {
	if err != nil {
		return nil, err
	}
	d, err := gpumem.OpenBackend(b, more...)
	if err != nil {
		return nil, errors.Join(err, b.Close())
	}
	return d, nil
}
