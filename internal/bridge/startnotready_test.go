package bridge

import (
	"strings"
	"testing"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	"github.com/spacesandbox/space/internal/guesttext"
)

// TestStartNotReadyLine: what the guest's Init said of its start command
// becomes one line for users, the guest's bytes escaped and bounded.
func TestStartNotReadyLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		nr   *controlv1.StartNotReady
		want string
	}{
		{"ready", nil, ""},
		{"ready failed", &controlv1.StartNotReady{Stage: "ready_failed", Detail: "did not exit 0 within 2s", LastStatus: "exit status 3", OutputTail: []byte("db\x1b[2J not up\n"), Tries: 4},
			`ready command failed: did not exit 0 within 2s (4 tries; last: exit status 3; output: db\x1b[2J not up\n)`},
		{"port", &controlv1.StartNotReady{Stage: "port_not_ready", Detail: "port 8080: not listening after 10s"},
			"start command's port not ready: port 8080: not listening after 10s"},
		{"not started", &controlv1.StartNotReady{Stage: "not_started", Detail: "exec: no such file"},
			"start command not started: exec: no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := startNotReady(tc.nr); got != tc.want {
				t.Errorf("startNotReady = %q, want %q", got, tc.want)
			}
		})
	}
	huge := &controlv1.StartNotReady{Stage: "ready_failed", Detail: strings.Repeat("\x00", 10<<10), OutputTail: []byte(strings.Repeat("\xff", 10<<10))}
	if got := startNotReady(huge); len(got) > guesttext.MaxBytes || strings.ContainsRune(got, 0) {
		t.Errorf("a 20 KiB hostile answer gave %d bytes (NUL kept: %v), want at most %d", len(got), strings.ContainsRune(got, 0), guesttext.MaxBytes)
	}
}
