package vmimage

import (
	"slices"
	"testing"
)

func TestParseKernelConfig(t *testing.T) {
	in := []byte(`#
# Automatically generated file; DO NOT EDIT.
#
CONFIG_64BIT=y
CONFIG_NR_CPUS=64
CONFIG_LOCALVERSION="-space"
CONFIG_PHYSICAL_START=0x1000000
# CONFIG_MODULES is not set
# a comment that is not an option

CONFIG_VIRTIO_BLK=m
`)
	got, err := ParseKernelConfig(in)
	if err != nil {
		t.Fatalf("ParseKernelConfig: %v", err)
	}
	want := KernelConfig{
		"CONFIG_64BIT": "y", "CONFIG_NR_CPUS": "64", "CONFIG_LOCALVERSION": `"-space"`,
		"CONFIG_PHYSICAL_START": "0x1000000", "CONFIG_MODULES": "n", "CONFIG_VIRTIO_BLK": "m",
	}
	if len(got) != len(want) {
		t.Errorf("got %d options %v, want %d", len(got), got, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for _, bad := range []string{
		"CONFIG_X", "X=y", "CONFIG_=y", "CONFIG_A B=y", "CONFIG_X=", `CONFIG_X="open`, "CONFIG_X=a b", "random words",
	} {
		if _, err := ParseKernelConfig([]byte(bad)); err == nil {
			t.Errorf("ParseKernelConfig(%q) = nil error", bad)
		}
	}
}

func TestKernelConfigMissing(t *testing.T) {
	want := KernelConfig{"CONFIG_A": "y", "CONFIG_B": "y", "CONFIG_C": "n", "CONFIG_D": `"x"`, "CONFIG_E": "n"}
	got := KernelConfig{"CONFIG_A": "y", "CONFIG_B": "m", "CONFIG_D": `"y"`, "CONFIG_E": "y", "CONFIG_OTHER": "y"}
	miss := want.Missing(got)
	wantMiss := []string{"CONFIG_B=y (got m)", `CONFIG_D="x" (got "y")`, "CONFIG_E=n (got y)"}
	if !slices.Equal(miss, wantMiss) {
		t.Errorf("Missing = %q, want %q", miss, wantMiss)
	}
	if miss := want.Missing(want); len(miss) != 0 {
		t.Errorf("a config misses its own options: %q", miss)
	}
}

// TestGuestKernelConfig checks the committed fragment parses and asks for
// what the guest needs: a change that drops one of these breaks the microvm
// guest in ways only a boot would show.
func TestGuestKernelConfig(t *testing.T) {
	c, err := ParseKernelConfig(GuestKernelConfig)
	if err != nil {
		t.Fatalf("guestkernel.config: %v", err)
	}
	for _, name := range []string{
		"CONFIG_64BIT", "CONFIG_SMP", "CONFIG_BLK_DEV_INITRD", "CONFIG_BINFMT_ELF", "CONFIG_MULTIUSER",
		"CONFIG_FUTEX", "CONFIG_EPOLL", "CONFIG_EVENTFD", "CONFIG_SIGNALFD", "CONFIG_INOTIFY_USER",
		"CONFIG_VIRTIO_MMIO", "CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES", "CONFIG_VIRTIO_BLK", "CONFIG_VIRTIO_CONSOLE",
		"CONFIG_HW_RANDOM_VIRTIO", "CONFIG_VIRTIO_VSOCKETS", "CONFIG_FW_CFG_SYSFS", "CONFIG_FW_CFG_SYSFS_CMDLINE",
		"CONFIG_SERIAL_8250_CONSOLE", "CONFIG_UNIX98_PTYS", "CONFIG_DEVTMPFS", "CONFIG_TMPFS", "CONFIG_EXT4_FS",
		"CONFIG_CGROUPS", "CONFIG_CGROUP_PIDS", "CONFIG_CGROUP_SCHED", "CONFIG_MEMCG", "CONFIG_NAMESPACES",
		"CONFIG_SECCOMP_FILTER", "CONFIG_UNIX", "CONFIG_INET", "CONFIG_NETDEVICES", "CONFIG_NET_CORE", "CONFIG_VIRTIO_NET",
	} {
		if c[name] != "y" {
			t.Errorf("guestkernel.config: %s=%q, want y", name, c[name])
		}
	}
	for name, v := range c {
		if v == "m" {
			t.Errorf("guestkernel.config: %s=m; the minimal kernel has no modules", name)
		}
	}
}

func TestMinimalKernelKey(t *testing.T) {
	sum := "5259c57ca92092da39bd2ea803046da0e3c28f2b6a11ea20f6297468188ceb67"
	k := MinimalKernelKey(sum, GuestKernelConfig)
	if len(k) != 64 || k != MinimalKernelKey(sum, GuestKernelConfig) {
		t.Fatalf("key %q: want 64 hex digits, stable", k)
	}
	other := append(slices.Clone(GuestKernelConfig), "CONFIG_IPV6=y\n"...)
	for _, k2 := range []string{
		MinimalKernelKey(sum, other),
		MinimalKernelKey("0"+sum[1:], GuestKernelConfig),
	} {
		if k2 == k {
			t.Errorf("a different source or fragment gave the same key %s", k)
		}
	}
}

func FuzzParseKernelConfig(f *testing.F) {
	f.Add(GuestKernelConfig)
	f.Add([]byte("# CONFIG_X is not set\nCONFIG_Y=\"a b\"\n"))
	f.Add([]byte("CONFIG_=\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseKernelConfig(b)
		if err != nil {
			return
		}
		for name, v := range c {
			if !validConfigName(name) || v != "n" && !validConfigValue(v) {
				t.Fatalf("accepted %q=%q", name, v)
			}
		}
		if miss := c.Missing(c); len(miss) != 0 {
			t.Fatalf("a config misses its own options: %q", miss)
		}
	})
}
