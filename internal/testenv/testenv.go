// Package testenv holds the checks tests use to skip, with the reason, when the
// machine lacks what they need (root, a tool, btrfs, a cgroup controller). CI
// runs as root with the tools installed, so these tests run there.
package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequiresRoot skips the test unless it runs as root.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (namespaces, cgroups, mounts); run the tests as root, as CI does")
	}
}

// RequiresTool skips the test unless every named program is on PATH, and
// returns the path of the first.
func RequiresTool(t testing.TB, names ...string) string {
	t.Helper()
	first := ""
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			t.Skipf("skipping: needs %s on PATH (apt-get install the package that provides it): %v", n, err)
		}
		if first == "" {
			first = p
		}
	}
	return first
}

// RequiresBtrfs skips the test unless btrfs can be used: root, btrfs-progs
// (mkfs.btrfs, btrfs), losetup and the kernel's btrfs support.
func RequiresBtrfs(t testing.TB) {
	t.Helper()
	RequiresRoot(t)
	RequiresTool(t, "mkfs.btrfs", "btrfs", "losetup", "mount", "umount")
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		t.Skipf("skipping: cannot read /proc/filesystems to check for btrfs: %v", err)
	}
	if !containsFS(string(b), "btrfs") {
		// The module may load on first mount; only skip when it cannot.
		if _, err := os.Stat("/sys/module/btrfs"); err != nil {
			if err := exec.Command("modprobe", "btrfs").Run(); err != nil {
				t.Skip("skipping: the kernel has no btrfs support (not in /proc/filesystems and modprobe btrfs failed)")
			}
		}
	}
}

func containsFS(list, name string) bool {
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == name {
			return true
		}
	}
	return false
}
