package ns

import (
	"os"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
)

// TestSysfsMasked checks that a sandbox's /sys shows nothing that names the
// host: no firmware tables, no DMI (vendor, product, serials), no hypervisor
// id, no block devices or buses, no PCI or platform device tree; what programs
// need (the CPU topology, the sandbox's own network interfaces) stays; and
// /proc/sys/kernel/random/boot_id is the sandbox's own, not the node's.
func TestSysfsMasked(t *testing.T) {
	testenv.RequiresRoot(t)
	d := newDriver(t, testConfig(t, t.TempDir()))
	s := startSandbox(t, d, spec(t, "sysfs"))

	if out, code := s.run(t, "ls /sys/class"); code != 0 || !strings.Contains(out, "net") {
		t.Skipf("skipping: this kernel does not let the sandbox mount sysfs (ls /sys/class: %q, exit %d)", out, code)
	}
	for _, p := range []string{"/sys/firmware", "/sys/class/dmi", "/sys/devices/virtual/dmi", "/sys/hypervisor", "/sys/block", "/sys/class/block", "/sys/dev", "/sys/bus", "/sys/module", "/sys/kernel", "/sys/power"} {
		if out, code := s.run(t, "ls -A "+p+" 2>/dev/null"); code == 0 && strings.TrimSpace(out) != "" {
			t.Errorf("%s is visible in the sandbox: %q", p, firstLines(out))
		}
	}
	if out, _ := s.run(t, "ls -A /sys/devices"); strings.TrimSpace(out) != "system\nvirtual" {
		t.Errorf("/sys/devices in the sandbox lists %q, want only system and virtual", firstLines(out))
	}
	if out, _ := s.run(t, "ls -A /sys/devices/virtual"); strings.TrimSpace(out) != "net" {
		t.Errorf("/sys/devices/virtual in the sandbox lists %q, want only net", firstLines(out))
	}
	s.want(t, "ls /sys/class/net", "lo")
	s.want(t, "cat /sys/class/net/lo/mtu", "65536")
	if out, code := s.run(t, "cat /sys/devices/system/cpu/online"); code != 0 || strings.TrimSpace(out) == "" {
		t.Errorf("/sys/devices/system/cpu/online: %q (exit %d), want the CPU list programs read", out, code)
	}
	if out, code := s.run(t, "mkdir /sys/x"); code == 0 || !strings.Contains(out, "Read-only") {
		t.Errorf("mkdir /sys/x: %q (exit %d), want a read-only /sys", out, code)
	}

	host, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	out, code := s.run(t, "cat /proc/sys/kernel/random/boot_id")
	if code != 0 || len(strings.TrimSpace(out)) != 36 {
		t.Errorf("boot_id in the sandbox: %q (exit %d), want a UUID", out, code)
	}
	if strings.TrimSpace(out) == strings.TrimSpace(string(host)) {
		t.Errorf("the sandbox reads the node's boot_id %s: two sandboxes could tell they share a node", strings.TrimSpace(out))
	}
}

func firstLines(s string) string {
	lines := strings.SplitN(s, "\n", 6)
	if len(lines) > 5 {
		lines = append(lines[:5], "…")
	}
	return strings.Join(lines, " ")
}
