package vm

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/driver/drivertest"
)

// TestConformance runs the runtime conformance suite against the vm driver
// with the real guest kernel, the real guest daemon and the minimal
// template's root image. Every execution starts the way production ones do,
// by restoring a template snapshot: one driver and one image serve the whole
// suite, so each VM size the suite asks for is booted once (to build its
// snapshot) and every execution after that is a restore.
func TestConformance(t *testing.T) {
	f := newFixture(t)
	// A cache of its own, so the template snapshots are built here and
	// removed with the test (their key names this run's image); the
	// initramfs is cheap to redo and the accelerator probe is shared.
	cacheDir := t.TempDir()
	_ = os.Link(filepath.Join(f.cacheDir, "accel.json"), filepath.Join(cacheDir, "accel.json"))
	var d *Driver
	t0 := time.Now()
	t.Cleanup(func() {
		if d == nil {
			return
		}
		// Every execution's own cleanup has stopped its VM by now; this
		// waits until their QEMU processes are reaped.
		d.Wait()
		c := d.Counters()
		t.Logf("vm conformance: %s; %d template snapshots built, %d executions restored from them, %d cold boots, %d template failures",
			time.Since(t0).Round(time.Millisecond), c.TemplateBuilds, c.TemplateRestores, c.ColdBoots, c.TemplateFailures)
		if c.TemplateFailures != 0 || c.ColdBoots != 0 {
			t.Errorf("counters %+v: want every execution restored from a template snapshot", c)
		}
	})
	drivertest.Run(t, drivertest.Harness{
		New: func(t *testing.T) driver.Driver {
			var err error
			d, err = New(Config{StateDir: t.TempDir(), Kernel: f.kernel, CacheDir: cacheDir, Log: testLogger(t)})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return d
		},
		// The driver clones the image for each execution and never writes it.
		RootFS:      func(*testing.T, string) string { return f.image },
		GuestBinary: f.guestBin,
	})
}
