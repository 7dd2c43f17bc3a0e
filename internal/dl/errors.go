package dl

import "errors"

// ErrUnsupportedOS is Open's error where drivers are not loaded (off Linux).
var ErrUnsupportedOS = errors.New("drivers are loaded on Linux only")
