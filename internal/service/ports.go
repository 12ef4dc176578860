package service

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// ParsePort reads a TCP port number, 1-65535.
func ParsePort(s string) (int, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w: port %q: want 1-65535", errdefs.ErrInvalidArgument, Clip(s))
	}
	return int(n), nil
}

// ParseIngressHost reads {port}-{sandbox}.{domain}[:apiport] (any case, a
// trailing dot allowed), the host name that reaches a sandbox's port. ok
// is false for a host that is not an ingress name; an ingress name with an
// impossible port or sandbox id has ok true and id "" (it answers 404, as
// an unknown sandbox does).
func ParseIngressHost(host, domain string) (id string, port int, ok bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	label, found := strings.CutSuffix(host, "."+strings.ToLower(domain))
	if !found || label == "" || strings.Contains(label, ".") {
		return "", 0, false
	}
	portText, id, found := strings.Cut(label, "-")
	if !found || portText == "" || strings.Trim(portText, "0123456789") != "" {
		return "", 0, false
	}
	p, err := ParsePort(portText)
	if err != nil || !sandbox.ValidID(id) {
		return "", 0, true
	}
	return id, p, true
}
