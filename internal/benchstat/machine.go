package benchstat

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// maxProcFile bounds what is read from a /proc file.
const maxProcFile = 64 << 10

// Machine describes the host a benchmark ran on (the client's, which is the
// server's too when both run on one machine).
type Machine struct {
	CPUs      int    `json:"cpus"`
	MemoryMiB int64  `json:"memory_mib"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
}

// ReadMachine describes this host. Facts that cannot be read (no /proc) are
// left zero or empty rather than failing the benchmark.
func ReadMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := readSmall("/proc/meminfo"); err == nil {
		m.MemoryMiB = ParseMemTotalMiB(b)
	}
	if b, err := readSmall("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = cleanKernel(string(b))
	}
	return m
}

// readSmall reads at most maxProcFile bytes of path.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxProcFile))
}

// ParseMemTotalMiB returns the MemTotal line of /proc/meminfo content in MiB,
// or 0 when there is none or it is malformed.
func ParseMemTotalMiB(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0
		}
		return kb / 1024
	}
	return 0
}

// cleanKernel trims the kernel release and keeps it short and printable.
func cleanKernel(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 128 {
		s = s[:128]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}
