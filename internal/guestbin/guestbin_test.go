package guestbin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

var (
	staticOnce sync.Once
	staticPath string
	staticErr  error
)

// staticBinary builds a tiny static Go program once per test binary.
func staticBinary(t *testing.T) []byte {
	t.Helper()
	staticOnce.Do(func() {
		dir, err := os.MkdirTemp("", "guestbin-static")
		if err != nil {
			staticErr = err
			return
		}
		src := filepath.Join(dir, "main.go")
		os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644)
		staticPath = filepath.Join(dir, "static")
		cmd := exec.Command("go", "build", "-o", staticPath, src)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			staticErr = errors.New(string(out))
		}
	})
	if staticErr != nil {
		t.Fatalf("build a static program: %v", staticErr)
	}
	b, err := os.ReadFile(staticPath)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("%s: %v", path, err)
	}
	return b
}

// withoutInterp turns the PT_INTERP program header of a 64-bit little-endian
// ELF into PT_NULL, leaving its DT_NEEDED entries.
func withoutInterp(t *testing.T, b []byte) []byte {
	t.Helper()
	b = bytes.Clone(b)
	off := binary.LittleEndian.Uint64(b[32:])
	size := uint64(binary.LittleEndian.Uint16(b[54:]))
	n := uint64(binary.LittleEndian.Uint16(b[56:]))
	found := false
	for i := uint64(0); i < n; i++ {
		p := b[off+i*size:]
		if elf.ProgType(binary.LittleEndian.Uint32(p)) == elf.PT_INTERP {
			binary.LittleEndian.PutUint32(p, uint32(elf.PT_NULL))
			found = true
		}
	}
	if !found {
		t.Fatal("no PT_INTERP to remove")
	}
	return b
}

func TestCheckELF(t *testing.T) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skip("the crafted wrong-architecture file needs amd64 or arm64")
	}
	static := staticBinary(t)
	dynamic := readFile(t, "/bin/true")
	otherArch := bytes.Clone(static)
	other := elf.EM_AARCH64
	if runtime.GOARCH == "arm64" {
		other = elf.EM_X86_64
	}
	binary.LittleEndian.PutUint16(otherArch[18:], uint16(other))
	object := bytes.Clone(static)
	binary.LittleEndian.PutUint16(object[16:], uint16(elf.ET_REL))
	tests := []struct {
		name string
		file []byte
		want string // "" passes; else a part of the reason
	}{
		{"static", static, ""},
		{"dynamic", dynamic, "program interpreter"},
		{"needs libraries, no interpreter", withoutInterp(t, dynamic), "needs shared libraries"},
		{"script", []byte("#!/bin/sh\nexec true\n"), "not an ELF"},
		{"empty", nil, "not an ELF"},
		{"truncated", static[:100], "not an ELF"},
		{"header only", static[:64], "not an ELF"},
		{"other architecture", otherArch, "is built for " + other.String()},
		{"relocatable object", object, "not an executable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CheckELF(bytes.NewReader(tt.file), int64(len(tt.file)), runtime.GOARCH)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("CheckELF = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	static := filepath.Join(dir, "space-guest")
	os.WriteFile(static, staticBinary(t), 0o755)
	notExec := filepath.Join(dir, "not-exec")
	os.WriteFile(notExec, staticBinary(t), 0o644)
	if err := Check(static); err != nil {
		t.Errorf("Check(static) = %v, want nil", err)
	}
	for _, tt := range []struct {
		path, want string
		class      error
	}{
		{"/bin/true", "dynamically linked", errdefs.ErrFailedPrecondition},
		{notExec, "not executable", errdefs.ErrFailedPrecondition},
		{dir, "not a regular file", errdefs.ErrFailedPrecondition},
		{filepath.Join(dir, "missing"), "does not exist", errdefs.ErrNotFound},
	} {
		err := Check(tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, tt.class) {
			t.Errorf("Check(%s) = %v, want %q, %v", tt.path, err, tt.want, tt.class)
			continue
		}
		if !strings.Contains(err.Error(), "CGO_ENABLED=0 go build -tags osusergo,netgo -o bin/space-guest ./cmd/space-guest") {
			t.Errorf("Check(%s) = %v, want the build command", tt.path, err)
		}
	}
}

// FuzzCheckELF feeds arbitrary bytes to the parser: it never panics and
// never passes a file without an ELF header.
func FuzzCheckELF(f *testing.F) {
	f.Add([]byte("#!/bin/sh\n"))
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	if b, err := os.ReadFile("/bin/true"); err == nil {
		f.Add(b[:min(len(b), 4096)])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := CheckELF(bytes.NewReader(b), int64(len(b)), "amd64")
		if got == "" && !bytes.HasPrefix(b, []byte("\x7fELF")) {
			t.Errorf("CheckELF passed a file with no ELF header")
		}
	})
}
