// Package guestbin checks that a space-guest binary can run inside a sandbox
// before anything is started with it: an ELF executable for this host's
// architecture, statically linked. A sandbox has no dynamic loader and no
// shared libraries, so a dynamically linked guest fails every create with
// "exec /.space/space-guest: no such file or directory"; the node-manager
// and `space server --dev` refuse to start with one instead.
//
// The file is treated as hostile: it is read through a bounded reader, the
// dynamic section is read only up to a fixed size, and no input panics
// (FuzzCheck).
package guestbin

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/spacesandbox/space/internal/errdefs"
)

// BuildHint says how to build a guest binary that passes Check.
const BuildHint = "build it with `make build`, or `CGO_ENABLED=0 go build -tags osusergo,netgo -o bin/space-guest ./cmd/space-guest`"

// maxSize bounds the file Check accepts; space-guest is about 15 MiB.
const maxSize = 512 << 20

// maxDynamic bounds the dynamic section Check reads.
const maxDynamic = 1 << 20

// Check returns nil when the file at path is a regular, executable,
// statically linked ELF executable for this host's architecture, and an
// error that says what is wrong and how to build a good one otherwise.
// The error is errdefs.ErrFailedPrecondition (ErrNotFound when the file is
// missing).
func Check(path string) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: guest binary %s does not exist: %s", errdefs.ErrNotFound, path, BuildHint)
		}
		return fmt.Errorf("%w: guest binary: %v: %s", errdefs.ErrFailedPrecondition, err, BuildHint)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%w: guest binary: %v: %s", errdefs.ErrFailedPrecondition, err, BuildHint)
	}
	if reason := checkFile(fi); reason != "" {
		return fmt.Errorf("%w: guest binary %s %s: %s", errdefs.ErrFailedPrecondition, path, reason, BuildHint)
	}
	if reason := CheckELF(f, fi.Size(), runtime.GOARCH); reason != "" {
		return fmt.Errorf("%w: guest binary %s %s: %s", errdefs.ErrFailedPrecondition, path, reason, BuildHint)
	}
	return nil
}

func checkFile(fi os.FileInfo) string {
	switch {
	case !fi.Mode().IsRegular():
		return "is not a regular file"
	case fi.Mode().Perm()&0o111 == 0:
		return "is not executable"
	case fi.Size() > maxSize:
		return fmt.Sprintf("is %d bytes, larger than the %d a guest daemon can be", fi.Size(), maxSize)
	}
	return ""
}

// machines maps GOARCH to the ELF machine of its executables.
var machines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"riscv64": elf.EM_RISCV, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "loong64": elf.EM_LOONGARCH,
}

// CheckELF reads size bytes of r as an ELF file and returns why it cannot
// run as the guest daemon on goarch ("" when it can): not ELF, not an
// executable, another architecture, or dynamically linked (a PT_INTERP
// program header or a DT_NEEDED entry). A static PIE (ET_DYN with neither)
// passes.
func CheckELF(r io.ReaderAt, size int64, goarch string) string {
	f, err := elf.NewFile(io.NewSectionReader(r, 0, size))
	if err != nil {
		return fmt.Sprintf("is not an ELF executable (%v)", err)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Sprintf("is an ELF %s, not an executable", f.Type)
	}
	want, ok := machines[goarch]
	if !ok {
		return fmt.Sprintf("cannot be checked: architecture %s is unknown", goarch)
	}
	if f.Machine != want {
		return fmt.Sprintf("is built for %s, this host runs %s (%s)", f.Machine, want, goarch)
	}
	if f.Entry == 0 {
		return "has no entry point: it is a shared library, not an executable"
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "is dynamically linked (it names a program interpreter, and a sandbox has none)"
		}
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_DYNAMIC {
			continue
		}
		needed, err := needsLibraries(p, f.Class, f.ByteOrder)
		if err != nil {
			return fmt.Sprintf("has an unreadable dynamic section (%v)", err)
		}
		if needed {
			return "is dynamically linked (it needs shared libraries, and a sandbox has none)"
		}
	}
	return ""
}

// needsLibraries reports whether the dynamic segment p has a DT_NEEDED
// entry, reading at most maxDynamic bytes of it.
func needsLibraries(p *elf.Prog, class elf.Class, order binary.ByteOrder) (bool, error) {
	n := p.Filesz
	if n > maxDynamic {
		n = maxDynamic
	}
	buf, err := io.ReadAll(io.LimitReader(p.Open(), int64(n)))
	if err != nil {
		return false, err
	}
	entry := 16
	if class == elf.ELFCLASS32 {
		entry = 8
	}
	for r := bytes.NewReader(buf); r.Len() >= entry; {
		var tag uint64
		if class == elf.ELFCLASS32 {
			var t, v uint32
			binary.Read(r, order, &t)
			binary.Read(r, order, &v)
			tag = uint64(t)
		} else {
			var v uint64
			binary.Read(r, order, &tag)
			binary.Read(r, order, &v)
		}
		switch elf.DynTag(tag) {
		case elf.DT_NULL:
			return false, nil
		case elf.DT_NEEDED:
			return true, nil
		}
	}
	return false, nil
}
