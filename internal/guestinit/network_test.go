package guestinit

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/spacesandbox/space/internal/sandboxnet"
)

func TestPickNIC(t *testing.T) {
	dev := func(name, encap string, flags net.Flags) netlink.Link {
		return &netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: name, EncapType: encap, Flags: flags}}
	}
	lo := dev("lo", "loopback", net.FlagLoopback|net.FlagUp)
	tunnel := &netlink.Sittun{LinkAttrs: netlink.LinkAttrs{Name: "sit0", EncapType: "sit"}}
	dummy := &netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: "dummy0", EncapType: "ether"}}
	for _, tc := range []struct {
		name    string
		links   []netlink.Link
		want    string // "" for an error
		noneErr bool   // the error is errNoNIC
	}{
		{"only lo", []netlink.Link{lo}, "", true},
		{"nothing", nil, "", true},
		{"virtual interfaces are not NICs", []netlink.Link{lo, tunnel, dummy}, "", true},
		{"the NIC", []netlink.Link{lo, tunnel, dev("eth0", "ether", 0)}, "eth0", false},
		{"renamed by the kernel", []netlink.Link{dev("enp0s2", "ether", 0), lo}, "enp0s2", false},
		{"two NICs", []netlink.Link{lo, dev("eth0", "ether", 0), dev("eth1", "ether", 0)}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickNIC(tc.links)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("pickNIC = %s, want an error", got.Attrs().Name)
				}
				if errors.Is(err, errNoNIC) != tc.noneErr {
					t.Errorf("pickNIC error %v: errNoNIC = %v, want %v (only no NIC at all is worth waiting for)", err, !tc.noneErr, tc.noneErr)
				}
				return
			}
			if err != nil || got.Attrs().Name != tc.want {
				t.Errorf("pickNIC = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestWriteResolvConf(t *testing.T) {
	want := sandboxnet.ResolvConf()
	t.Run("no etc", func(t *testing.T) {
		root := t.TempDir()
		if err := writeResolvConf(root, want); err != nil {
			t.Fatal(err)
		}
		checkResolvConf(t, root, want)
	})
	t.Run("replaces a symlink without following it", func(t *testing.T) {
		root := t.TempDir()
		target := filepath.Join(root, "stub-resolv.conf")
		if err := os.WriteFile(target, []byte("nameserver 127.0.0.53\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Mkdir(filepath.Join(root, "etc"), 0o755)
		if err := os.Symlink(target, filepath.Join(root, "etc", "resolv.conf")); err != nil {
			t.Fatal(err)
		}
		if err := writeResolvConf(root, want); err != nil {
			t.Fatal(err)
		}
		checkResolvConf(t, root, want)
		if b, _ := os.ReadFile(target); string(b) != "nameserver 127.0.0.53\n" {
			t.Errorf("the symlink's target was written: %q", b)
		}
	})
	t.Run("dangling symlink", func(t *testing.T) {
		root := t.TempDir()
		os.Mkdir(filepath.Join(root, "etc"), 0o755)
		if err := os.Symlink("/run/systemd/resolve/stub-resolv.conf", filepath.Join(root, "etc", "resolv.conf")); err != nil {
			t.Fatal(err)
		}
		if err := writeResolvConf(root, want); err != nil {
			t.Fatal(err)
		}
		checkResolvConf(t, root, want)
	})
	t.Run("a directory in the way fails", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "etc", "resolv.conf", "x"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeResolvConf(root, want); err == nil {
			t.Error("writeResolvConf over a directory succeeded")
		}
		if left, _ := filepath.Glob(filepath.Join(root, "etc", ".resolv.conf.space-*")); len(left) != 0 {
			t.Errorf("temporary files left: %q", left)
		}
	})
}

func checkResolvConf(t *testing.T, root string, want []byte) {
	t.Helper()
	p := filepath.Join(root, "etc", "resolv.conf")
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("%s: %v, %v; want a regular file, mode 0644", p, fi, err)
	}
	if got, _ := os.ReadFile(p); string(got) != string(want) {
		t.Errorf("resolv.conf = %q, want %q", got, want)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "etc", ".resolv.conf.space-*")); len(left) != 0 {
		t.Errorf("temporary files left: %q", left)
	}
}
