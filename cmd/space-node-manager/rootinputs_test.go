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

// TestRootDirs (catalogue A-9): the node-manager refuses a data, cache or
// socket directory that another user could change — root kills the pids
// and claims the uids the data directory's state files name, and every VM
// boots the cache directory's kernel — and accepts one that is root's (or
// an allowed uid's: the unprivileged node writes its records there).
func TestRootDirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: chown needs root")
	}
	ok := func() (data, cache, socket string) {
		base := t.TempDir()
		data, cache = filepath.Join(base, "data"), filepath.Join(base, "shared", "cache")
		for _, d := range []string{data, cache, filepath.Join(data, "run")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return data, cache, filepath.Join(data, "run", "node-manager.sock")
	}
	data, cache, socket := ok()
	if err := rootDirs(data, cache, socket, nil); err != nil {
		t.Fatalf("rootDirs with root's directories: %v", err)
	}
	if err := rootDirs(data, filepath.Join(cache, "not", "yet"), socket, nil); err != nil {
		t.Errorf("rootDirs with a cache directory still to be made under root's: %v", err)
	}
	for _, tc := range []struct {
		name  string
		spoil func(data, cache, socket string) string // the directory it spoiled
		flag  string
		want  string
	}{
		{"DataDirWorldWritable", func(data, _, _ string) string { return data }, "--data-dir", "writable by its group or others"},
		{"CacheDirWorldWritable", func(_, cache, _ string) string { return cache }, "--cache-dir", "writable by its group or others"},
		{"SocketDirWorldWritable", func(_, _, socket string) string { return filepath.Dir(socket) }, "--socket", "writable by its group or others"},
		{"DataDirAnotherUsers", func(data, _, _ string) string { return data }, "--data-dir", "belongs to uid 4242"},
		{"ParentOfCacheWritable", func(_, cache, _ string) string { return filepath.Dir(cache) }, "--cache-dir", "writable by its group or others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, cache, socket := ok()
			dir := tc.spoil(data, cache, socket)
			var err error
			if strings.Contains(tc.want, "uid") {
				err = os.Chown(dir, 4242, 4242)
			} else {
				err = os.Chmod(dir, 0o777)
			}
			if err != nil {
				t.Fatal(err)
			}
			err = rootDirs(data, cache, socket, nil)
			if err == nil || !strings.HasPrefix(err.Error(), tc.flag+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("rootDirs with %s spoiled = %v, want a refusal naming %s and %q", dir, err, tc.flag, tc.want)
			}
			if strings.Contains(tc.want, "uid") {
				if err := rootDirs(data, cache, socket, []uint32{4242}); err != nil {
					t.Errorf("rootDirs with the data directory of an allowed uid: %v", err)
				}
			}
		})
	}
}
