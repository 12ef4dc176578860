package vmimage

import (
	"bytes"
	_ "embed"
	"fmt"
	"sort"
	"strings"
)

// GuestKernelConfig is the configuration fragment of the minimal guest
// kernel (guestkernel.config): the options it must have, everything else off.
//
//go:embed guestkernel.config
var GuestKernelConfig []byte

// maxKernelConfigBytes bounds a kernel .config or fragment read by the
// builder (a full distribution config is about 250 KiB).
const maxKernelConfigBytes = 4 << 20

// KernelConfig maps option names (CONFIG_...) to their values as written in
// a .config: "y", "m", a number or a quoted string; "n" for "is not set".
type KernelConfig map[string]string

// ParseKernelConfig reads a kernel .config or configuration fragment:
// "CONFIG_X=value" lines and "# CONFIG_X is not set" comments; other comments
// and blank lines are skipped, anything else is an error.
func ParseKernelConfig(b []byte) (KernelConfig, error) {
	if len(b) > maxKernelConfigBytes {
		return nil, fmt.Errorf("kernel config: %d bytes, at most %d", len(b), maxKernelConfigBytes)
	}
	c := KernelConfig{}
	for i, line := range bytes.Split(b, []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" {
			continue
		}
		if name, ok := strings.CutPrefix(s, "# "); ok {
			if name, ok = strings.CutSuffix(name, " is not set"); ok && validConfigName(name) {
				c[name] = "n"
			}
			continue
		}
		if strings.HasPrefix(s, "#") {
			continue
		}
		name, value, ok := strings.Cut(s, "=")
		if !ok || !validConfigName(name) || !validConfigValue(value) {
			return nil, fmt.Errorf("kernel config line %d: %q is not CONFIG_NAME=value", i+1, truncate(s, 80))
		}
		c[name] = value
	}
	return c, nil
}

// Missing returns, sorted, the options of want that got does not have with
// the same value, each as "CONFIG_X=want (got v)". An option wanted "n" is
// satisfied by its absence.
func (want KernelConfig) Missing(got KernelConfig) []string {
	var out []string
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			g = "n"
		}
		if g != w {
			out = append(out, fmt.Sprintf("%s=%s (got %s)", name, w, g))
		}
	}
	sort.Strings(out)
	return out
}

func validConfigName(s string) bool {
	rest, ok := strings.CutPrefix(s, "CONFIG_")
	if !ok || rest == "" || len(s) > 128 {
		return false
	}
	for _, c := range []byte(rest) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// validConfigValue accepts what Kconfig writes: a bare word (y, m, numbers,
// hex) or a double-quoted string.
func validConfigValue(v string) bool {
	if v == "" || len(v) > 4096 || strings.ContainsAny(v, "\x00\r") {
		return false
	}
	if v[0] == '"' {
		return len(v) >= 2 && v[len(v)-1] == '"'
	}
	return !strings.ContainsAny(v, " \t\"#")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
