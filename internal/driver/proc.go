package driver

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/spacesandbox/space/internal/errdefs"
)

// ProcStartTime returns field 22 (starttime, in clock ticks since boot) of
// /proc/<pid>/stat. A dead pid gives an error of class NotFound.
func ProcStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, os.ErrProcessDone) {
		return 0, fmt.Errorf("pid %d: %w", pid, errdefs.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("pid %d: read stat: %w", pid, err)
	}
	return ParseStatStartTime(b)
}

// ParseStatStartTime extracts field 22 from the contents of a /proc/<pid>/stat
// file. The command name (field 2) is chosen by the process and may hold spaces
// and parentheses, so parsing starts after its last ')'.
func ParseStatStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no command name")
	}
	// After ")" come fields 3.. separated by single spaces; starttime is field 22.
	fields := bytes.Fields(stat[i+1:])
	const idx = 22 - 3
	if len(fields) <= idx {
		return 0, fmt.Errorf("proc stat: %d fields after the command name, want more than %d", len(fields), idx)
	}
	v, err := strconv.ParseUint(string(fields[idx]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc stat: starttime: %w", err)
	}
	return v, nil
}

// ProcAlive reports whether pid is running with the given start time (a zombie
// counts as not running).
func ProcAlive(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	st, err := ParseStatStartTime(b)
	if err != nil || st != startTime {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}
