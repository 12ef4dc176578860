package node

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// processStartTime reads a process's start time (clock ticks since boot, field
// 22 of /proc/PID/stat). With the pid it names one process for the life of the
// machine: a reused pid has another start time.
func processStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatStartTime(b)
}

// parseStatStartTime parses /proc/PID/stat. The command name (field 2) may hold
// spaces and parentheses, so fields are counted from the last ')'.
func parseStatStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no command name")
	}
	fields := bytes.Fields(stat[i+1:])
	// fields[0] is field 3 (state); start time is field 22.
	const idx = 22 - 3
	if len(fields) <= idx {
		return 0, fmt.Errorf("proc stat: %d fields, want more than %d", len(fields), idx+3)
	}
	return strconv.ParseUint(string(fields[idx]), 10, 64)
}
