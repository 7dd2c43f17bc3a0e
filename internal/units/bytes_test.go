package units

import "testing"

func TestBytesPrintsABinaryUnitWithTwoDecimals(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.00 KiB"},
		{1536, "1.50 KiB"},
		{1<<20 - 1, "1024.00 KiB"},
		{1 << 20, "1.00 MiB"},
		{80 << 30, "80.00 GiB"},
		{3 << 40, "3.00 TiB"},
		{1 << 60, "1.00 EiB"},
		{^uint64(0), "16.00 EiB"},
	} {
		if got := Bytes(c.n).String(); got != c.want {
			t.Errorf("Bytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
