package ns

import (
	"os"
	"strconv"
	"testing"

	"github.com/spacesandbox/space/internal/cgroup"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/driver/drivertest"
	"github.com/spacesandbox/space/internal/testenv"
)

// TestConformance runs the runtime conformance suite against the ns driver
// with the real guest daemon and the real minimal template.
func TestConformance(t *testing.T) {
	testenv.RequiresRoot(t)
	testenv.RequiresTool(t, "go", "cp")
	rootFS := drivertest.MinimalRootFS(t)
	guest := drivertest.BuildGuest(t)
	var workload func(int64, int) (int64, int)
	if h, err := cgroup.Detect(); err == nil && h.Mode != cgroup.V2 {
		workload = WorkloadLimits
	}
	drivertest.Run(t, drivertest.Harness{
		New: func(t *testing.T) driver.Driver {
			return newDriver(t, Config{
				StateDir:     t.TempDir(),
				CgroupParent: "space-conformance-" + strconv.Itoa(os.Getpid()),
				// Apart from the ranges of the package's other tests.
				UIDBase: 300_000_000,
				Slots:   64,
			})
		},
		RootFS:         rootFS,
		GuestBinary:    guest,
		WorkloadLimits: workload,
	})
}
