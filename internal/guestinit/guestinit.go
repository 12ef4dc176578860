// Package guestinit turns space-guest into the init of a vm-runtime guest:
// started by the kernel as /init of the initramfs, Boot loads the kernel
// modules the VM needs, mounts the sandbox's root disk, moves into it (the
// steps of switch_root), applies the host's per-VM configuration, and execs
// the guest daemon from /.space/space-guest as PID 1, exactly as the ns
// runtime runs it (an exec keeps /proc/1/environ and cmdline true).
//
// The initramfs layout it expects (written by internal/vmimage):
//
//	/init                  the space-guest binary
//	/lib/modules/order     module file names, one a line, dependencies first
//	/lib/modules/*.ko      the modules
//	/dev /proc /sys /newroot, /dev/console
//
// The configuration comes over QEMU's fw_cfg device (file FWCfgName), so it
// never has to fit on the kernel command line. It is host-trusted input, still
// parsed with bounds.
//
// This package is part of the guest binary: it imports nothing of the host
// but internal/sandboxnet, the guest's side of the sandbox network.
package guestinit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Paths and names shared by the initramfs builder, the VM driver and Boot.
const (
	// ModuleOrderFile lists the initramfs's modules in load order.
	ModuleOrderFile = "/lib/modules/order"
	// ModulesDir holds the modules in the initramfs.
	ModulesDir = "/lib/modules"
	// FWCfgName is the fw_cfg file that carries Config as JSON.
	FWCfgName = "opt/space/config"
	// RootDevice is the sandbox's root disk (the first virtio-blk device).
	RootDevice = "/dev/vda"
	// NewRoot is where the root disk is mounted before the switch.
	NewRoot = "/newroot"
	// GuestBinary is where the guest binary is visible in the sandbox root,
	// as in the ns runtime.
	GuestBinary = "/.space/space-guest"
	// StartedMarker is the line Boot prints on the console first: the VM
	// driver's accelerator probe waits for it.
	StartedMarker = "space-guest: init started"
	// MaxConfigBytes bounds the configuration read from fw_cfg.
	MaxConfigBytes = 256 << 10
)

// Config is the host's per-VM configuration.
type Config struct {
	// Hostname is set with sethostname; empty keeps the kernel's default.
	Hostname string `json:"hostname,omitempty"`
	// Env is added to the daemon's environment.
	Env map[string]string `json:"env,omitempty"`
	// Network makes Boot configure the VM's one network interface (its
	// virtio-net NIC) as sandboxnet.IfName with sandboxnet's addresses and
	// write the sandbox's /etc/resolv.conf; a failure ends the boot.
	Network bool `json:"network,omitempty"`
	// Probe makes Boot print StartedMarker and power the VM off at once: the
	// host is checking that the accelerator can boot a guest.
	Probe bool `json:"probe,omitempty"`
}

// ParseConfig decodes and checks a configuration.
func ParseConfig(b []byte) (*Config, error) {
	if len(b) > MaxConfigBytes {
		return nil, fmt.Errorf("guest config: %d bytes, at most %d allowed", len(b), MaxConfigBytes)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("guest config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks every field.
func (c *Config) Validate() error {
	if len(c.Hostname) > 64 {
		return errors.New("guest config: hostname longer than 64 bytes")
	}
	for _, r := range c.Hostname {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return fmt.Errorf("guest config: hostname %q: only letters, digits, - and . are allowed", c.Hostname)
		}
	}
	for k, v := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("guest config: env %q: names must be non-empty without = or NUL, values without NUL", k)
		}
	}
	return nil
}

// ParseModuleOrder returns the module file names of an order file: one
// name a line, each a plain file name ending in .ko.
func ParseModuleOrder(b []byte) ([]string, error) {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !strings.HasSuffix(line, ".ko") || strings.ContainsAny(line, "/\x00") || line == ".ko" || len(line) > 128 {
			return nil, fmt.Errorf("module order: %q is not a module file name", line)
		}
		out = append(out, line)
	}
	return out, nil
}
