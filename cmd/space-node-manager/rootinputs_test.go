package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/hostbin"
)

// TestRootInputs (catalogue ): the node-manager runs programs by
// name from RootPATH only, whatever PATH it inherited, and refuses to start
// with a guest binary — copied into every sandbox — inside the data
// directory, where a sandbox could replace it for all the others.
func TestRootInputs(t *testing.T) {
	data := t.TempDir()
	planted := filepath.Join(data, "volumes", "sb1", "rootfs", "usr", "bin")
	if err := os.MkdirAll(planted, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"btrfs", "space-guest"} {
		os.WriteFile(filepath.Join(planted, name), []byte("#!/bin/sh\n"), 0o755)
	}
	guest := filepath.Join(t.TempDir(), "space-guest")
	os.WriteFile(guest, []byte("\x7fELF"), 0o755)
	t.Setenv("PATH", planted+":"+os.Getenv("PATH"))
	if err := rootInputs(data, guest); err != nil {
		t.Fatalf("rootInputs with a guest binary outside the data dir: %v", err)
	}
	if got := os.Getenv("PATH"); got != hostbin.RootPATH {
		t.Errorf("PATH = %q, want %q", got, hostbin.RootPATH)
	}
	if p, err := exec.LookPath("btrfs"); err == nil && strings.HasPrefix(p, data) {
		t.Errorf("btrfs resolves to %s, inside a sandbox's root", p)
	}
	err := rootInputs(data, filepath.Join(planted, "space-guest"))
	if err == nil || !strings.Contains(err.Error(), "which sandboxes write into") {
		t.Errorf("rootInputs with the guest binary in a sandbox's root = %v, want its refusal", err)
	}
	// The programs it runs by name are checked as found: here one given by
	// path (LookPath takes it as it is) that anyone could rewrite.
	loose := filepath.Join(t.TempDir(), "qemu-system-x86_64")
	os.WriteFile(loose, []byte("#!/bin/sh\n"), 0o755)
	os.Chmod(loose, 0o777)
	if err := rootInputs(data, guest, append(rootTools, loose)...); err == nil || !strings.Contains(err.Error(), "writable by its group or others") {
		t.Errorf("rootInputs with a world-writable tool = %v, want its refusal", err)
	}
	if err := rootInputs(data, guest, rootTools...); err != nil {
		t.Errorf("rootInputs with this system's tools: %v", err)
	}
}
