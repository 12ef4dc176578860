package vm

import (
	"os"
	"testing"

	"github.com/spacesandbox/space/internal/reexec"
)

// TestMain lets this test binary run the jail helper, as the node-manager
// binary does (TestJailHelperReportsErrors, and every test that starts QEMU).
func TestMain(m *testing.M) {
	reexec.Run(reexec.Helpers{JailHelper: JailMain})
	os.Exit(m.Run())
}
