package mempressure

import (
	"strings"
	"testing"
)

// FuzzParseMeminfo: whatever the input, ParseMeminfo returns a consistent
// reading or an error, never panics.
func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte(realMeminfo))
	f.Add([]byte("MemTotal: 5 kB\nMemAvailable: 6 kB\n"))
	f.Add([]byte("MemTotal: 18446744073709551615 kB\nMemAvailable: 1 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMeminfo(b)
		if err != nil {
			return
		}
		if m.TotalKiB == 0 || m.AvailableKiB > m.TotalKiB {
			t.Fatalf("ParseMeminfo(%q) = %+v without error", b, m)
		}
		if !strings.Contains(string(b), "MemTotal:") || !strings.Contains(string(b), "MemAvailable:") {
			t.Fatalf("ParseMeminfo(%q) accepted input without both lines", b)
		}
	})
}

// FuzzParsePSI: whatever the input, ParsePSI returns averages in [0, 100]
// or an error, never panics.
func FuzzParsePSI(f *testing.F) {
	f.Add([]byte("some avg10=35.00 avg60=1.50 avg300=0.02 total=123456\nfull avg10=3.10 avg60=0.00 avg300=0.00 total=99\n"))
	f.Add([]byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePSI(b)
		if err != nil {
			return
		}
		for _, l := range []PSILine{p.Some, p.Full} {
			for _, a := range []float64{l.Avg10, l.Avg60, l.Avg300} {
				if !(a >= 0 && a <= 100) {
					t.Fatalf("ParsePSI(%q) = %+v: average %v out of range", b, p, a)
				}
			}
		}
		if !strings.HasPrefix(string(b), "some avg10=") {
			t.Fatalf("ParsePSI(%q) accepted input not starting with some", b)
		}
	})
}
