package vm

// The sandbox's network interface (driver.Spec.Network). The VM gets one
// virtio-net NIC (virtio-net-device on microvm's virtio-mmio, virtio-net-pci
// on q35) with sandboxnet.GuestMAC, whose backend is QEMU's stream netdev: a
// unix server socket, net.sock in the execution's directory (pre-bound by
// the jail helper like the chardev sockets and passed as addr.type=fd), on
// which every Ethernet frame travels preceded by its length as a 4-byte
// big-endian integer (driver.FramingStream). The driver connects to it and
// hands the connection out as Instance.Link; the guest's init configures the
// interface (guestinit.Config.Network).
//
// QEMU serves one client at a time and takes the next one once the current
// one has gone (verified with QEMU 7.2 by TestNetwork's ReopenLink): ReopenLink
// connects anew after the node lost its end. Until a client is connected
// QEMU drops the guest's frames, as a cable-less switch port would.
//
// Whether a VM has a NIC is part of its persisted state and of its
// checkpoints (the restored QEMU must have the same devices); a restore
// follows the checkpoint, whatever the spec asks (see restore).

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandboxnet"
)

const (
	// netSock is the stream netdev's socket in the execution's directory.
	netSock = "net.sock"
	// netdevID is the stream netdev's id; QMP names it in the
	// NETDEV_STREAM_CONNECTED and _DISCONNECTED events.
	netdevID = "net0"
	// nicID is the NIC's device id.
	nicID = "nic0"
	// linkAcceptTimeout bounds ReopenLink's wait for QEMU to take the new
	// connection.
	linkAcceptTimeout = 10 * time.Second
)

// nicOptions are the NIC's options common to every machine.
func nicOptions() string {
	return "netdev=" + netdevID + ",id=" + nicID + ",mac=" + sandboxnet.GuestMAC.String()
}

// netdevArg is the -netdev argument of the stream server on netSock.
func netdevArg() string {
	return "stream,id=" + netdevID + ",server=on,addr.type=unix,addr.path=" + netSock
}

// networkArgs are QEMU's arguments of the network of machine layout m:
// none without a NIC.
func networkArgs(m machineLayout) []string {
	if m.nic == "" {
		return nil
	}
	return []string{"-netdev", netdevArg(), "-device", m.nic}
}

// connectLink connects to the stream netdev's socket of st, waiting for QEMU
// to create it, and returns the link over that connection.
func (d *Driver) connectLink(ctx context.Context, st *state) (*driver.Link, error) {
	c, err := d.dialRetry(ctx, st, netSock)
	if err != nil {
		return nil, fmt.Errorf("network link: %w", err)
	}
	f, err := c.File()
	c.Close()
	if err != nil {
		return nil, fmt.Errorf("network link: %w", err)
	}
	return &driver.Link{File: f, Framing: driver.FramingStream}, nil
}

// ReopenLink connects to the execution's network interface again and
// returns the new host end, for a caller that lost its previous one (a
// restart of the node). QEMU takes the new connection only once the
// previous end is closed everywhere: ReopenLink waits for QEMU to report it
// connected (QMP NETDEV_STREAM_CONNECTED) and fails with ErrConflict when
// another end still holds the link after linkAcceptTimeout. An execution
// without a network fails with ErrFailedPrecondition.
func (d *Driver) ReopenLink(ctx context.Context, execID string) (*driver.Link, error) {
	st, err := d.loadState(execID)
	if err != nil {
		return nil, err
	}
	if !st.Network {
		return nil, fmt.Errorf("vm: exec %s: reopen link: %w: the execution has no network", execID, errdefs.ErrFailedPrecondition)
	}
	if !driver.ProcAlive(st.Pid, st.StartTime) {
		return nil, fmt.Errorf("vm: exec %s: reopen link: %w: QEMU is not running", execID, errdefs.ErrFailedPrecondition)
	}
	// The session is open before the connection is made, so the event of
	// QEMU accepting it cannot be missed.
	s, err := d.openQMP(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("vm: exec %s: reopen link: %w", execID, err)
	}
	defer s.Close()
	link, err := d.connectLink(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("vm: exec %s: reopen link: %w", execID, err)
	}
	err = s.waitEvents(linkAcceptTimeout, func(ev []*qmpMessage) bool {
		return netdevConnected(ev, netdevID)
	})
	if err != nil {
		link.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("vm: exec %s: reopen link: %w", execID, ctx.Err())
		}
		return nil, fmt.Errorf("vm: exec %s: reopen link: %w: QEMU did not take the new connection within %s; another end of the link is still open (close it first): %v",
			execID, errdefs.ErrConflict, linkAcceptTimeout, err)
	}
	d.log.Info("network link reopened", "exec", execID)
	return link, nil
}

// netdevConnected reports whether events hold a NETDEV_STREAM_CONNECTED
// event of the netdev id.
func netdevConnected(events []*qmpMessage, id string) bool {
	for _, m := range events {
		if m.Event != "NETDEV_STREAM_CONNECTED" {
			continue
		}
		var e struct {
			NetdevID string `json:"netdev-id"`
		}
		if json.Unmarshal(m.Data, &e) == nil && e.NetdevID == id {
			return true
		}
	}
	return false
}
