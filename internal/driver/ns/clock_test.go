package ns

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/testenv"
)

// TestOwnClock: a sandbox's /proc/uptime is its own age, not the node's,
// and /proc/stat's btime is its own start, so two sandboxes cannot tell
// from their boot times that they share a node.
func TestOwnClock(t *testing.T) {
	testenv.RequiresRoot(t)
	if !timeNamespaces() {
		t.Skip("skipping: this kernel has no time namespaces")
	}
	d := newDriver(t, testConfig(t, t.TempDir()))
	before := time.Now()
	s := startSandbox(t, d, spec(t, "clock"))

	out, code := s.run(t, "cat /proc/uptime")
	fields := strings.Fields(out)
	if code != 0 || len(fields) != 2 {
		t.Fatalf("cat /proc/uptime in the sandbox: %q (exit %d)", out, code)
	}
	uptime, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		t.Fatalf("uptime %q: %v", fields[0], err)
	}
	// The sandbox's clock started after before, within one second of
	// rounding (its offsets are whole seconds).
	if age := time.Since(before).Seconds(); uptime > age+1 {
		t.Errorf("the sandbox's uptime is %.2f s, %.2f s after it was started: it reads the node's clock", uptime, age)
	}
	out, code = s.run(t, "grep '^btime ' /proc/stat")
	fields = strings.Fields(out)
	if code != 0 || len(fields) != 2 {
		t.Fatalf("btime in the sandbox: %q (exit %d)", out, code)
	}
	btime, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		t.Fatalf("btime %q: %v", fields[1], err)
	}
	if btime < before.Unix()-2 {
		t.Errorf("the sandbox's btime is %s, before it was started (%s): it is the node's boot time", time.Unix(btime, 0).UTC(), before.UTC())
	}
}
