package guestinit

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/spacesandbox/space/internal/sandboxnet"
)

// resolvConf is the sandbox's resolver configuration, in the new root.
const resolvConf = "/etc/resolv.conf"

// configureNetwork gives the VM its network (Config.Network): it waits for
// the one network interface (the virtio-net NIC; its driver probes
// asynchronously), names it sandboxnet.IfName, configures it with
// sandboxnet's addresses (the MAC is QEMU's, sandboxnet.GuestMAC already)
// and writes the resolver configuration into root.
func configureNetwork(log *slog.Logger, root string) error {
	link, err := waitNIC(deviceWait)
	if err != nil {
		return err
	}
	name := link.Attrs().Name
	if name != sandboxnet.IfName {
		// An interface is renamed while down; it has not been up yet.
		if err := netlink.LinkSetDown(link); err != nil {
			return fmt.Errorf("network: bring %s down: %w", name, err)
		}
		if err := netlink.LinkSetName(link, sandboxnet.IfName); err != nil {
			return fmt.Errorf("network: rename %s to %s: %w", name, sandboxnet.IfName, err)
		}
	}
	if err := sandboxnet.Configure(sandboxnet.IfName, false); err != nil {
		return err
	}
	if err := writeResolvConf(root, sandboxnet.ResolvConf()); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	log.Info("network configured", "interface", sandboxnet.IfName, "was", name, "mac", link.Attrs().HardwareAddr,
		"address", sandboxnet.GuestPrefix, "gateway", sandboxnet.Gateway)
	return nil
}

// waitNIC returns the VM's network interface once the kernel has registered
// it, waiting at most wait.
func waitNIC(wait time.Duration) (netlink.Link, error) {
	deadline := time.Now().Add(wait)
	for {
		links, err := netlink.LinkList()
		if err != nil {
			return nil, fmt.Errorf("network: list interfaces: %w", err)
		}
		link, err := pickNIC(links)
		if err == nil {
			return link, nil
		}
		if !errors.Is(err, errNoNIC) || time.Now().After(deadline) {
			return nil, fmt.Errorf("network: %w (after %s)", err, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// errNoNIC says the kernel has registered no network interface (yet).
var errNoNIC = errors.New("no network interface: the VM has no NIC, or its driver (virtio_net) is missing")

// pickNIC returns the one Ethernet device of links, ignoring loopback and
// virtual interfaces (tunnels the kernel may create). It fails with
// errNoNIC when there is none, and otherwise when there are several: the VM
// has exactly one NIC, and configuring the wrong one would be worse than
// failing.
func pickNIC(links []netlink.Link) (netlink.Link, error) {
	var found []netlink.Link
	for _, l := range links {
		a := l.Attrs()
		if a == nil || a.Flags&net.FlagLoopback != 0 || l.Type() != "device" || a.EncapType != "ether" {
			continue
		}
		found = append(found, l)
	}
	switch len(found) {
	case 0:
		return nil, errNoNIC
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, l := range found {
		names[i] = l.Attrs().Name
	}
	return nil, fmt.Errorf("found %d network interfaces (%s), want one", len(found), strings.Join(names, ", "))
}

// writeResolvConf writes content to root's /etc/resolv.conf, replacing what
// is there. A symlink (images often point it at a resolver daemon's file) is
// replaced, never followed: the file is written beside it and renamed over
// it.
func writeResolvConf(root string, content []byte) error {
	path := filepath.Join(root, resolvConf)
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", resolvConf, err)
	}
	f, err := os.CreateTemp(dir, ".resolv.conf.space-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", resolvConf, err)
	}
	tmp := f.Name()
	_, err = f.Write(content)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", resolvConf, err)
	}
	return nil
}
