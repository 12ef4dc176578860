package sandbox

import (
	"errors"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

func TestNewAndExecutions(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	spec, err := ValidateCreate(sandboxv1.CreateSandboxRequest{Template: "minimal", Timeout: "1h", Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	sb := New("t-0123456789abcdef", spec, now)
	if !ValidID(sb.ID) || sb.State != StateCreating || sb.Desired != StateRunning || sb.Generation != 1 {
		t.Fatalf("New = id %q state %q desired %q gen %d; want valid id, creating, running, 1", sb.ID, sb.State, sb.Desired, sb.Generation)
	}
	if !ValidExecID(sb.ExecID) || !strings.HasPrefix(sb.ExecID, sb.ID+"-g1-") {
		t.Errorf("ExecID = %q, want %s-g1-<rand>", sb.ExecID, sb.ID)
	}
	derived := DerivedID("create", "t-0123456789abcdef", "key")
	sb.SetID(derived)
	if sb.ID != derived || !ValidExecID(sb.ExecID) || !strings.HasPrefix(sb.ExecID, derived+"-g1-") {
		t.Errorf("after SetID(%s): id %s, ExecID %q; want the execution under the new id", derived, sb.ID, sb.ExecID)
	}
	if want := now.Add(time.Hour); !sb.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", sb.ExpiresAt, want)
	}
	if sb.Expired(now) || !sb.Expired(now.Add(time.Hour)) {
		t.Error("Expired wrong around ExpiresAt")
	}

	sb.State, sb.Node = StateRunning, "node-1"
	firstExec := sb.ExecID
	steps := []struct {
		op      Op
		state   State
		gen     uint64
		newExec bool
	}{
		{OpPause, StatePausing, 1, false},
		{OpPause, StatePausing, 1, false},
		{OpFail, StateFailed, 1, false},
		{OpRecover, StateRecovering, 2, true},
		{OpRecover, StateRecovering, 2, false},
		{OpDelete, StateDeleting, 2, false},
	}
	prevExec := firstExec
	for _, st := range steps {
		if err := sb.Apply(st.op); err != nil {
			t.Fatalf("Apply(%s): %v", st.op, err)
		}
		if sb.State != st.state || sb.Generation != st.gen {
			t.Fatalf("after %s: state %q gen %d, want %q %d", st.op, sb.State, sb.Generation, st.state, st.gen)
		}
		if changed := sb.ExecID != prevExec; changed != st.newExec {
			t.Errorf("after %s: exec id changed = %v, want %v", st.op, changed, st.newExec)
		}
		if st.newExec && sb.Node != "" {
			t.Errorf("after %s: node %q kept for a new execution", st.op, sb.Node)
		}
		prevExec = sb.ExecID
	}
	before := *sb
	if err := sb.Apply(OpPause); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("pause while deleting: err = %v, want conflict", err)
	}
	if sb.State != before.State || sb.Generation != before.Generation {
		t.Error("illegal Apply changed the sandbox")
	}
}

func TestFailReason(t *testing.T) {
	sb := New("t-0123456789abcdef", Spec{Template: "base"}, time.Now())
	if err := sb.Fail("boot timed out"); err != nil {
		t.Fatal(err)
	}
	if sb.State != StateFailed || sb.Reason != "boot timed out" {
		t.Fatalf("state %q reason %q", sb.State, sb.Reason)
	}
	if err := sb.Apply(OpRecover); err != nil || sb.Reason != "" {
		t.Fatalf("recover: err %v, reason %q kept", err, sb.Reason)
	}
}

func TestAPIAndClone(t *testing.T) {
	sb := New("t-0123456789abcdef", Spec{Template: "base", CPUs: 2, Metadata: map[string]string{"k": "v"}}, time.Now())
	c := sb.Clone()
	c.Metadata["k"] = "changed"
	if sb.Metadata["k"] != "v" {
		t.Error("Clone shares Metadata")
	}
	a := sb.API()
	if a.ID != sb.ID || a.State != sandboxv1.StateCreating || a.CPUs != 2 || a.ExpiresAt != nil {
		t.Errorf("API() = %+v", a)
	}
}

func TestIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if !ValidID(id) {
			t.Fatalf("NewID() = %q, not valid", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
	if id := NewTenantID(); !ValidTenantID(id) || ValidKeyID(id) {
		t.Errorf("NewTenantID() = %q", id)
	}
	if id := NewKeyID(); !ValidKeyID(id) || ValidTenantID(id) {
		t.Errorf("NewKeyID() = %q", id)
	}
	for _, bad := range []string{"", "ABCDEFGHIJ0123456789", "abc", "abcdefghij0123456789x", "abcdefghij012345678/", "../../../../../etc/p"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"abcdefghij0123456789-g1-abcd1234", true},
		{"abcdefghij0123456789-g12-abcd1234", true},
		{"abcdefghij0123456789-g0-abcd1234", false},
		{"abcdefghij0123456789-g01-abcd1234", false},
		{"abcdefghij0123456789-g1-abcd123", false},
		{"abcdefghij0123456789-g1-ABCD1234", false},
		{"abcdefghij0123456789-1-abcd1234", false},
	} {
		if got := ValidExecID(tc.s); got != tc.want {
			t.Errorf("ValidExecID(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}
