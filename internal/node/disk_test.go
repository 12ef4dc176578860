package node

import (
	"testing"

	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/sandbox"
)

// TestDefaultDiskMatchesTheControlPlanes: warm-pool executions are made with
// privop.DefaultDiskMiB, and claimWarm hands them to sandboxes that asked for
// the control plane's default disk size: the two must be one number.
func TestDefaultDiskMatchesTheControlPlanes(t *testing.T) {
	if privop.DefaultDiskMiB != sandbox.DefaultDiskMiB {
		t.Errorf("privop.DefaultDiskMiB = %d, sandbox.DefaultDiskMiB = %d: want them equal", privop.DefaultDiskMiB, sandbox.DefaultDiskMiB)
	}
}
