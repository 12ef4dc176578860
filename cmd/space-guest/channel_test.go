package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFindVirtioPort(t *testing.T) {
	sys := t.TempDir()
	for port, name := range map[string]string{"vport1p1": "org.qemu.guest_agent.0", "vport2p1": "space.guest\n"} {
		if err := os.MkdirAll(filepath.Join(sys, port), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sys, port, "name"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := findVirtioPort(sys, "/dev", "space.guest")
	if err != nil || got != "/dev/vport2p1" {
		t.Errorf("findVirtioPort(space.guest) = %q, %v; want /dev/vport2p1", got, err)
	}
	if _, err := findVirtioPort(sys, "/dev", "missing"); err == nil {
		t.Errorf("findVirtioPort(missing) succeeded")
	}
}
