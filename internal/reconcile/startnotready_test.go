package reconcile

import (
	"strings"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/guesttext"
	"github.com/spacesandbox/space/internal/sandbox"
)

// TestCreateRecordsStartNotReady: the node's answer that the template's
// start command was not ready becomes one start_not_ready event, its
// guest-written text escaped and bounded even when the node did neither
// (a terminal escape, a newline, a bidi override, invalid UTF-8, 10 KiB).
// The sandbox runs anyway.
func TestCreateRecordsStartNotReady(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{}, false)
	hostile := "ready command failed: did not exit 0 within 2s (3 tries; last: exit status 3; output: \x1b[2J\x1b]0;pwned\x07\nfake: line\u202e\xff" +
		strings.Repeat("A", 10<<10) + ")"
	h.nodes["n1"].startExec = &nodev1.Execution{State: nodev1.ExecRunning, StartNotReady: hostile}
	sb := h.newSandbox(sandbox.StateCreating, "ns", nil)
	h.mustPass(sb.ID)
	h.wantState(sb.ID, sandbox.StateRunning, sandbox.StateRunning)
	var got []string
	for _, e := range h.events(sb.ID) {
		if msg, ok := strings.CutPrefix(e, EventStartNotReady+": "); ok {
			got = append(got, msg)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d start_not_ready events, want 1; events %q", len(got), h.events(sb.ID))
	}
	msg := got[0]
	if !strings.Contains(msg, "exit status 3") || !strings.Contains(msg, `\x1b[2J\x1b]0;pwned\x07\nfake: line\u{202e}\xff`) {
		t.Errorf("event %.200q: want the exit status and the control bytes escaped", msg)
	}
	if len(msg) > guesttext.MaxBytes {
		t.Errorf("event is %d bytes, want at most %d", len(msg), guesttext.MaxBytes)
	}
	if strings.ContainsAny(msg, "\x1b\x07\n\u202e") || !strings.HasSuffix(msg, "…") {
		t.Errorf("event %.200q...: raw control characters, or not marked as cut", msg)
	}
	// A second pass (the node's Start answer no longer carries the note)
	// adds no second event.
	h.nodes["n1"].startExec = nil
	h.mustPass(sb.ID)
	n := 0
	for _, e := range h.events(sb.ID) {
		if strings.HasPrefix(e, EventStartNotReady+": ") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d start_not_ready events after a second pass, want 1", n)
	}
}
