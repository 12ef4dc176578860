package vmimage

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// defaultExpectedObjects is about how many files the compile of the minimal
// kernel makes (Kbuild "CC" and "AS" lines of linux-source-6.1 with
// GuestKernelConfig: 995, measured 2026-12-02); a finished build records its own count
// (objectsFile), which later builds expect instead.
const defaultExpectedObjects = 995

// objectsFile, below cacheDir/minimal-kernel, holds the object count of the
// last build.
const objectsFile = "objects"

// expectedObjects returns about how many objects a build below parent makes.
func expectedObjects(parent string) int {
	b, err := readFileLimit(filepath.Join(parent, objectsFile), 32)
	if err != nil {
		return defaultExpectedObjects
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 100 || n > 1_000_000 {
		return defaultExpectedObjects
	}
	return n
}

// rememberObjects records a finished build's object count for the next.
func rememberObjects(parent string, n int) {
	if n > 0 {
		_ = os.WriteFile(filepath.Join(parent, objectsFile), []byte(strconv.Itoa(n)+"\n"), 0o644)
	}
}

// buildOutput passes make's output to w and calls object for every line
// that says Kbuild compiled or assembled a file ("  CC      kernel/fork.o",
// "  AS      arch/x86/entry/entry_64.o"). Lines are split across writes as
// they come; a line longer than the buffer is dropped from the count.
type buildOutput struct {
	w      io.Writer
	object func()
	line   []byte
}

func (o *buildOutput) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	rest := p[:n]
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if len(o.line)+len(rest) <= 512 {
				o.line = append(o.line, rest...)
			} else {
				o.line = o.line[:0]
			}
			break
		}
		o.line = append(o.line, rest[:i]...)
		if isObjectLine(o.line) {
			o.object()
		}
		o.line, rest = o.line[:0], rest[i+1:]
	}
	return n, err
}

// isObjectLine reports whether a Kbuild output line names a compiled or
// assembled object: "  CC      path.o" or "  AS      path.o" (not the
// "  CC [M]" of modules, which the minimal kernel has none of, and not
// "  CC      path.s" or header steps).
func isObjectLine(line []byte) bool {
	f := strings.Fields(string(line))
	return len(f) == 2 && (f[0] == "CC" || f[0] == "AS") && strings.HasSuffix(f[1], ".o")
}

// LogKernelProgress returns a KernelBuildOptions.Progress that logs a build's
// progress to log: at every step, and during a step at most every interval.
func LogKernelProgress(log *slog.Logger, every time.Duration) func(KernelBuildProgress) {
	var lastStep string
	var lastLog time.Time
	return func(p KernelBuildProgress) {
		if p.Step != lastStep || time.Since(lastLog) >= every {
			lastStep, lastLog = p.Step, time.Now()
			log.Info("minimal guest kernel build", "progress", p.String())
		}
	}
}
