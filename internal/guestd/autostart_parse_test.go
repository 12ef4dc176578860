package guestd

import "testing"

func TestReadyPort(t *testing.T) {
	for head, want := range map[string]int{
		"#!/bin/sh\n# space-ready-port: 49999\nexec server\n": 49999,
		"#!/bin/sh\n  # space-ready-port:8000  \n":            8000,
		"#!/bin/sh\nexec server\n":                            0,
		"# space-ready-port: 0\n":                             0,
		"# space-ready-port: 65536\n":                         0,
		"# space-ready-port: http\n":                          0,
		"# space-ready-port: -1\n":                            0,
		"echo '# space-ready-port: 1'\n":                      0,
		"":                                                    0,
	} {
		if got := readyPort([]byte(head)); got != want {
			t.Errorf("readyPort(%q) = %d, want %d", head, got, want)
		}
	}
}

func FuzzReadyPort(f *testing.F) {
	f.Add([]byte("#!/bin/sh\n# space-ready-port: 49999\n"))
	f.Add([]byte("# space-ready-port: 99999999999999999999\n"))
	f.Fuzz(func(t *testing.T, head []byte) {
		if p := readyPort(head); p < 0 || p > 65535 {
			t.Fatalf("readyPort(%q) = %d: not a port", head, p)
		}
	})
}
