package credentials

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// maxHostLen bounds a host name (RFC 1035), plus room for one trailing dot.
const maxHostLen = 254

// NormalizeHost returns host in the form matching compares: lower case,
// without one trailing dot, an IP address in its canonical text. host is a
// DNS name or an IP address (IPv6 optionally in brackets), without a port.
// The error is ErrInvalidArgument.
func NormalizeHost(host string) (string, error) {
	if len(host) == 0 || len(host) > maxHostLen {
		return "", fmt.Errorf("host %.64q: want 1 to %d bytes: %w", host, maxHostLen-1, errdefs.ErrInvalidArgument)
	}
	ipText := host
	if strings.HasPrefix(ipText, "[") && strings.HasSuffix(ipText, "]") {
		ipText = ipText[1 : len(ipText)-1]
	}
	if ip, err := netip.ParseAddr(ipText); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("host %.64q: an IP address with a zone is not a credential host: %w", host, errdefs.ErrInvalidArgument)
		}
		return ip.Unmap().String(), nil
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if err := validDNSName(name); err != nil {
		return "", fmt.Errorf("host %.64q: %w", host, err)
	}
	return name, nil
}

// validDNSName checks a lower-case name without a trailing dot: 1 to 253
// bytes, labels of 1 to 63 bytes of [a-z0-9_-] not starting or ending with
// a hyphen.
func validDNSName(name string) error {
	if len(name) == 0 || len(name) > 253 {
		return fmt.Errorf("name of %d bytes, want 1 to 253: %w", len(name), errdefs.ErrInvalidArgument)
	}
	for label := range strings.SplitSeq(name, ".") {
		if len(label) == 0 || len(label) > 63 {
			return fmt.Errorf("label %.64q: want 1 to 63 bytes: %w", label, errdefs.ErrInvalidArgument)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with a hyphen: %w", label, errdefs.ErrInvalidArgument)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("label %q: byte %d not in [a-z0-9_-]: %w", label, i, errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// ValidHostPattern checks an allowed-host pattern: a host NormalizeHost
// accepts, or "*." followed by a DNS name of at least two labels ("*.com"
// and a bare "*" are too broad). The error is ErrInvalidArgument.
func ValidHostPattern(p string) error {
	_, _, err := parsePattern(p)
	return err
}

// parsePattern splits a pattern into its normalized host and whether it is
// a wildcard.
func parsePattern(p string) (host string, wildcard bool, err error) {
	if rest, ok := strings.CutPrefix(p, "*."); ok {
		name, err := NormalizeHost(rest)
		if err != nil {
			return "", false, fmt.Errorf("allowed host %.64q: %w", p, err)
		}
		if _, ipErr := netip.ParseAddr(name); ipErr == nil || !strings.Contains(name, ".") {
			return "", false, fmt.Errorf("allowed host %.64q: a wildcard needs a domain of two or more labels: %w", p, errdefs.ErrInvalidArgument)
		}
		return name, true, nil
	}
	if strings.Contains(p, "*") {
		return "", false, fmt.Errorf("allowed host %.64q: '*' only as a leading \"*.\": %w", p, errdefs.ErrInvalidArgument)
	}
	name, err := NormalizeHost(p)
	if err != nil {
		return "", false, fmt.Errorf("allowed host %.64q: %w", p, err)
	}
	return name, false, nil
}

// MatchHost reports whether the (already normalized) host matches pattern,
// and how specifically: an exact match ranks above any wildcard, and a
// longer wildcard suffix above a shorter one. A malformed pattern matches
// nothing.
func MatchHost(pattern, normalizedHost string) (ok bool, rank int) {
	name, wildcard, err := parsePattern(pattern)
	if err != nil {
		return false, 0
	}
	if !wildcard {
		return name == normalizedHost, 1 << 16
	}
	suffix := "." + name
	if len(normalizedHost) > len(suffix) && strings.HasSuffix(normalizedHost, suffix) {
		return true, len(suffix)
	}
	return false, 0
}

// matchHosts returns the best rank among patterns that match host, or -1.
func matchHosts(patterns []string, normalizedHost string) int {
	best := -1
	for _, p := range patterns {
		if ok, rank := MatchHost(p, normalizedHost); ok && rank > best {
			best = rank
		}
	}
	return best
}
