package vmimage

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestBuildOutputCountsObjects: every Kbuild line of a compiled or
// assembled object counts once, however make's output is split into
// writes, and the output reaches the log unchanged.
func TestBuildOutputCountsObjects(t *testing.T) {
	out := "  SYNC    include/config/auto.conf\n" +
		"  CC      kernel/fork.o\n" +
		"  AS      arch/x86/entry/entry_64.o\n" +
		"  CC      scripts/mod/empty.s\n" +
		"  LD      vmlinux.o\n" +
		"  CC [M]  drivers/x.o\n" +
		"kernel/fork.c:12: warning: CC      fake.o in a message\n" +
		"  CC      init/main.o\n"
	for _, chunk := range []int{1, 3, 7, len(out)} {
		var log bytes.Buffer
		n := 0
		o := &buildOutput{w: &log, object: func() { n++ }}
		for i := 0; i < len(out); i += chunk {
			if _, err := o.Write([]byte(out[i:min(i+chunk, len(out))])); err != nil {
				t.Fatal(err)
			}
		}
		if n != 3 || log.String() != out {
			t.Errorf("chunks of %d: counted %d objects (want 3), log equal %v", chunk, n, log.String() == out)
		}
	}
	// A line longer than the buffer is not counted, and does not break the
	// lines after it.
	n := 0
	o := &buildOutput{w: &bytes.Buffer{}, object: func() { n++ }}
	o.Write([]byte("  CC      " + strings.Repeat("x", 600)))
	o.Write([]byte(".o\n  CC      a.o\n"))
	if n != 1 {
		t.Errorf("after an overlong line: counted %d, want 1", n)
	}
}

func TestKernelBuildProgress(t *testing.T) {
	for _, tc := range []struct {
		p    KernelBuildProgress
		pc   int
		text string
	}{
		{KernelBuildProgress{Step: "configure"}, -1, "configure"},
		{KernelBuildProgress{Step: "compile", Objects: 875, Expected: 1750}, 50, "compile: 875 of about 1750 objects (50%)"},
		{KernelBuildProgress{Step: "compile", Objects: 2000, Expected: 1750}, 99, "compile: 2000 of about 1750 objects (99%)"},
		{KernelBuildProgress{Step: "compile", Objects: 10}, -1, "compile: 10 objects"},
	} {
		if got := tc.p.Percent(); got != tc.pc {
			t.Errorf("%+v: Percent = %d, want %d", tc.p, got, tc.pc)
		}
		if got := tc.p.String(); got != tc.text {
			t.Errorf("%+v: String = %q, want %q", tc.p, got, tc.text)
		}
	}
}

// TestExpectedObjects: a build expects the last build's count, and the
// measured default when there is none or it is garbage.
func TestExpectedObjects(t *testing.T) {
	dir := t.TempDir()
	if got := expectedObjects(dir); got != defaultExpectedObjects {
		t.Errorf("no record: %d, want %d", got, defaultExpectedObjects)
	}
	rememberObjects(dir, 2345)
	if got := expectedObjects(dir); got != 2345 {
		t.Errorf("after a build of 2345: %d", got)
	}
	for _, bad := range []string{"x\n", "-5\n", "99999999999\n", "3"} {
		os.WriteFile(filepath.Join(dir, objectsFile), []byte(bad), 0o644)
		if got := expectedObjects(dir); got != defaultExpectedObjects {
			t.Errorf("record %q: %d, want the default", bad, got)
		}
	}
}

// TestAwaitMinimalKernelWaitsForBuilder: while another holder has the build
// lock, AwaitMinimalKernel waits for it; with nobody building it answers
// NotFound at once and never builds.
func TestAwaitMinimalKernelWaitsForBuilder(t *testing.T) {
	requireApt(t)
	cache := t.TempDir()
	ctx := context.Background()
	if _, err := AwaitMinimalKernel(ctx, cache); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("empty cache: %v, want NotFound", err)
	}
	parent := filepath.Join(cache, minimalKernelDir)
	os.MkdirAll(parent, 0o755)
	unlock, err := lockFile(ctx, filepath.Join(parent, buildLock))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := AwaitMinimalKernel(ctx, cache)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("AwaitMinimalKernel returned %v while a build held the lock", err)
	case <-time.After(1500 * time.Millisecond):
	}
	unlock() // the "build" ends without a kernel
	if err := <-done; !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("after the builder gave up: %v, want NotFound", err)
	}
	// A lock file nobody holds is no build.
	f, _ := os.Open(filepath.Join(parent, buildLock))
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatalf("the lock is still held: %v", err)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := AwaitMinimalKernel(cctx, cache); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a lock file with no holder: %v, want NotFound", err)
	}
}

// TestLogKernelProgress: every step is logged, readings within a step only
// once the interval has passed.
func TestLogKernelProgress(t *testing.T) {
	var buf bytes.Buffer
	logged := LogKernelProgress(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour)
	for _, p := range []KernelBuildProgress{{Step: "configure"}, {Step: "compile", Objects: 1}, {Step: "compile", Objects: 2}, {Step: "collect the image"}} {
		logged(p)
	}
	if n := strings.Count(buf.String(), "minimal guest kernel build"); n != 3 || strings.Contains(buf.String(), "compile: 2 ") {
		t.Errorf("logged %d lines, want 3 (each step once):\n%s", n, &buf)
	}
}
