package service

import (
	"errors"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestResolveAutoNoNode: with no live node, auto cannot decide yet (the
// create waits for a node), rather than picking ns.
func TestResolveAutoNoNode(t *testing.T) {
	s := &Sandboxes{cfg: Config{RuntimeFallback: "ns"}}
	if _, _, err := s.resolveAuto(runtimeState{}); err != errNoNodeYet {
		t.Errorf("resolveAuto with no node: %v, want errNoNodeYet", err)
	}
	if _, _, err := (&Sandboxes{}).resolveAuto(runtimeState{live: 1}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("resolveAuto with no vm and no fallback: %v, want FailedPrecondition", err)
	}
}
