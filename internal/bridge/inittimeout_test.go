package bridge

import (
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/template/imagecfg"
)

// TestInitTimeoutHoldsTheReadyBound: the bridge's copy of the ready
// command's bound is imagecfg's, and Init's bound leaves room after it.
func TestInitTimeoutHoldsTheReadyBound(t *testing.T) {
	if want := imagecfg.MaxReadyTimeout * time.Second; maxReadyTimeout != want {
		t.Errorf("maxReadyTimeout = %v, imagecfg.MaxReadyTimeout = %v: keep them equal", maxReadyTimeout, want)
	}
	if initTimeout <= maxReadyTimeout+time.Minute {
		t.Errorf("initTimeout %v leaves no room for the port waits after a %v ready command", initTimeout, maxReadyTimeout)
	}
}
