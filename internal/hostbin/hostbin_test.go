package hostbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCheck refuses a missing binary, a directory and a file that is not
// executable, naming `make build` and the package to build; it accepts an
// executable file.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "space-host-bridge")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "space-node-manager"), dir, plain} {
		err := Check(path)
		if err == nil || !strings.Contains(err.Error(), "make build") || !strings.Contains(err.Error(), "./cmd/"+filepath.Base(path)) {
			t.Errorf("Check(%s) = %v; want a refusal naming make build", path, err)
		}
	}
	if err := os.Chmod(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Check(plain); err != nil {
		t.Errorf("Check(an executable) = %v", err)
	}
}

// TestCheckRootExec (catalogue ): what root runs or reads its policy
// from is refused under a sandbox-writable tree — directly or through a
// symlink — and when another user or group could change it.
func TestCheckRootExec(t *testing.T) {
	defer syscall.Umask(syscall.Umask(0o022))
	base := t.TempDir()
	data := filepath.Join(base, "data")
	roots := filepath.Join(data, "volumes", "sandboxes", "sb1", "rootfs", "usr", "bin")
	if err := os.MkdirAll(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	inSandbox := filepath.Join(roots, "qemu-system-x86_64")
	os.WriteFile(inSandbox, []byte("#!/bin/sh\n"), 0o755)
	trusted := filepath.Join(base, "bin")
	os.Mkdir(trusted, 0o755)
	good := filepath.Join(trusted, "space-node-manager")
	os.WriteFile(good, []byte("#!/bin/sh\n"), 0o755)
	link := filepath.Join(trusted, "btrfs")
	os.Symlink(inSandbox, link)
	worldFile := filepath.Join(trusted, "world")
	os.WriteFile(worldFile, []byte("#!/bin/sh\n"), 0o755)
	os.Chmod(worldFile, 0o777)
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o777)
	inOpen := filepath.Join(open, "mount")
	os.WriteFile(inOpen, []byte("#!/bin/sh\n"), 0o755)
	sticky := filepath.Join(base, "sticky")
	os.Mkdir(sticky, 0o755)
	os.Chmod(sticky, 0o777|os.ModeSticky)
	os.Mkdir(filepath.Join(sticky, "own"), 0o755)
	inSticky := filepath.Join(sticky, "own", "cp")
	os.WriteFile(inSticky, []byte("#!/bin/sh\n"), 0o755)

	for path, want := range map[string]string{
		inSandbox:  "which sandboxes write into",
		link:       "which sandboxes write into",
		worldFile:  "writable by its group or others",
		inOpen:     "writable by its group or others",
		good:       "",
		inSticky:   "",
		"/bin/sh":  "",
		"/usr/bin": "",
	} {
		err := CheckRootExec(path, data)
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckRootExec(%s) = %v, want nil", path, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CheckRootExec(%s) = %v, want %q", path, err, want)
		}
	}
}

// TestSetRootPATH: whatever PATH the node-manager was started with — here
// one naming a sandbox's bin directory first — it runs programs by name
// from RootPATH only.
func TestSetRootPATH(t *testing.T) {
	data := t.TempDir()
	planted := filepath.Join(data, "volumes", "sb1", "bin")
	os.MkdirAll(planted, 0o755)
	os.WriteFile(filepath.Join(planted, "sh"), []byte("#!/bin/sh\n"), 0o755)
	t.Setenv("PATH", planted+":"+os.Getenv("PATH"))
	if err := SetRootPATH(data); err != nil {
		t.Fatal(err)
	}
	if got := os.Getenv("PATH"); got != RootPATH {
		t.Errorf("PATH = %q, want %q", got, RootPATH)
	}
	if p, err := exec.LookPath("sh"); err != nil || strings.HasPrefix(p, data) {
		t.Errorf("sh resolves to %q (%v), want one outside the sandbox's tree", p, err)
	}
	if err := SetRootPATH("/usr"); err == nil {
		t.Error("SetRootPATH with /usr as a sandbox tree = nil, want its refusal")
	}
}

// TestCheckRootDir: a directory root keeps state in must be root's (or an
// allowed uid's) alone, up to /; one still to be made is checked from its
// nearest existing ancestor; a file is not a directory.
func TestCheckRootDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: chown needs root")
	}
	base := t.TempDir()
	good := filepath.Join(base, "good")
	loose := filepath.Join(base, "loose")
	theirs := filepath.Join(base, "theirs")
	file := filepath.Join(base, "file")
	for _, d := range []string{good, loose, theirs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(loose, 0o775)
	os.Chown(theirs, 4242, 4242)
	os.WriteFile(file, nil, 0o600)
	if err := os.Symlink(loose, filepath.Join(good, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path   string
		owners []uint32
		want   string // "" for nil
	}{
		{good, nil, ""},
		{filepath.Join(good, "a", "b"), nil, ""},
		{filepath.Join(loose, "a"), nil, "writable by its group or others"},
		{filepath.Join(good, "link"), nil, "writable by its group or others"},
		{theirs, nil, "belongs to uid 4242"},
		{theirs, []uint32{4242}, ""},
		{file, nil, "is not a directory"},
	} {
		err := CheckRootDir(tc.path, tc.owners...)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckRootDir(%s, %v) = %v, want %q", tc.path, tc.owners, err, tc.want)
		}
	}
}
