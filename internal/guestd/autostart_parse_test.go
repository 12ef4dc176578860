package guestd

import (
	"testing"
	"time"
)

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

func TestReadyWait(t *testing.T) {
	for head, want := range map[string]time.Duration{
		"#!/bin/sh\n# space-ready-port: 49999\n# space-ready-wait: 60\n": 60 * time.Second,
		"# space-ready-wait:5\n":                     5 * time.Second,
		"# space-ready-port: 49999\n":                autostartReadyWait,
		"# space-ready-wait: 61\n":                   autostartReadyWait,
		"# space-ready-wait: 0\n":                    autostartReadyWait,
		"# space-ready-wait: -5\n":                   autostartReadyWait,
		"# space-ready-wait: 99999999999999999999\n": autostartReadyWait,
		"# space-ready-wait: ten\n":                  autostartReadyWait,
		"echo '# space-ready-wait: 30'\n":            autostartReadyWait,
	} {
		if got := readyWait([]byte(head)); got != want {
			t.Errorf("readyWait(%q) = %v, want %v", head, got, want)
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
		if w := readyWait(head); w < time.Second || w > maxAutostartReadyWait {
			t.Fatalf("readyWait(%q) = %v: outside 1s..%v", head, w, maxAutostartReadyWait)
		}
	})
}
