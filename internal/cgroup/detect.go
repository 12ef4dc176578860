// Package cgroup places sandbox executions in control groups and enforces
// their memory, task and CPU limits, on cgroup v1 (including "hybrid" hosts
// that also mount an empty v2 hierarchy) and on pure cgroup v2 hosts.
//
// One execution gets one group, named after its execution id, under a common
// parent ("space") in every controller it needs. A Group is only a set of
// paths: every method works from the kernel's state, so a restarted process
// can build the same Group from the same names and kill, measure or remove
// what its predecessor created.
package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mode is the cgroup version the package drives on this host.
type Mode int

// The modes.
const (
	// V1 drives one hierarchy per controller (memory, pids, cpu, cpuacct,
	// freezer). Hosts that also mount a v2 hierarchy ("hybrid") use V1: their
	// controllers are bound to v1.
	V1 Mode = 1
	// V2 drives the unified hierarchy.
	V2 Mode = 2
)

func (m Mode) String() string {
	switch m {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return "unknown"
}

// Hierarchy says where the cgroup filesystems of this host are mounted.
type Hierarchy struct {
	// Mode is the version in use.
	Mode Mode
	// Hybrid is true for a v1 host that also mounts a v2 hierarchy.
	Hybrid bool
	// V1 maps each v1 controller name to its mount point.
	V1 map[string]string
	// V2 is the v2 mount point, if any.
	V2 string
}

// Controllers used in v1 mode; the first three are required.
var (
	requiredV1 = []string{"memory", "pids", "freezer"}
	optionalV1 = []string{"cpu", "cpuacct"}
)

// Detect reads /proc/self/mountinfo.
func Detect() (*Hierarchy, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("cgroup: detect: %w", err)
	}
	return ParseMountinfo(b)
}

// ParseMountinfo finds the cgroup mounts in the contents of a mountinfo file
// and decides the mode.
func ParseMountinfo(b []byte) (*Hierarchy, error) {
	h := &Hierarchy{V1: map[string]string{}}
	for _, line := range bytes.Split(b, []byte("\n")) {
		m, ok := parseMountLine(string(line))
		if !ok || m.root != "/" {
			// Only whole hierarchies: a bind of a sub-group (containers) would
			// put our groups somewhere unexpected.
			continue
		}
		switch m.fstype {
		case "cgroup2":
			if h.V2 == "" {
				h.V2 = m.point
			}
		case "cgroup":
			for _, opt := range strings.Split(m.superOpts, ",") {
				if isV1Controller(opt) {
					if _, dup := h.V1[opt]; !dup {
						h.V1[opt] = m.point
					}
				}
			}
		}
	}
	switch {
	case h.V1["memory"] != "" || h.V1["pids"] != "":
		h.Mode, h.Hybrid = V1, h.V2 != ""
		for _, c := range requiredV1 {
			if h.V1[c] == "" {
				return nil, fmt.Errorf("cgroup: v1 host without the %s controller mounted: mount it (mount -t cgroup -o %s cgroup /sys/fs/cgroup/%s)", c, c, c)
			}
		}
	case h.V2 != "":
		h.Mode = V2
	default:
		return nil, errors.New("cgroup: no cgroup filesystem is mounted: mount cgroup2 on /sys/fs/cgroup")
	}
	return h, nil
}

func isV1Controller(opt string) bool {
	for _, c := range requiredV1 {
		if c == opt {
			return true
		}
	}
	for _, c := range optionalV1 {
		if c == opt {
			return true
		}
	}
	return false
}

type mountLine struct {
	root, point, fstype, superOpts string
}

// parseMountLine parses "id parent maj:min root point opts [optional…] - fstype source superopts".
func parseMountLine(line string) (mountLine, bool) {
	f := strings.Fields(line)
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || len(f) < sep+4 {
		return mountLine{}, false
	}
	return mountLine{
		root:      unescapeOctal(f[3]),
		point:     unescapeOctal(f[4]),
		fstype:    f[sep+1],
		superOpts: f[sep+3],
	}, true
}

// unescapeOctal undoes the kernel's \ooo escaping of spaces, tabs, newlines
// and backslashes in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
