package e2bapi

// E2B's network.maskRequestHost: the Host header every request to a
// sandbox's port carries when it reaches the sandbox, in place of the one
// the client sent (a server in the sandbox that checks its Host, a dev
// server's allowed hosts, sees the name it expects). "${PORT}" in it is
// replaced with the port the request is for. SPACE keeps it in the
// sandbox's any-port rule (store.ServicePort.HostMask) and the ingress
// applies it (internal/ingress).

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/service"
)

// hostMaskPort is the placeholder of maskRequestHost that stands for the
// port.
const hostMaskPort = service.HostMaskPort

// maxHostMask bounds maskRequestHost: a DNS name (253) and a port.
const maxHostMask = 260

// parseHostMask checks an E2B maskRequestHost and returns it: a host name
// or address, with an optional :port, in which ${PORT} may stand for the
// port or a part of a name. Whatever port replaces ${PORT}, the result is a
// valid Host header.
func parseHostMask(mask string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: network.maskRequestHost %q: %s; want a host name with an optional port, where %s stands for the port (as ${PORT}-myapp.example.com or myapp.local:${PORT})",
			errdefs.ErrInvalidArgument, service.Clip(mask), why, hostMaskPort)
	}
	if len(mask) > maxHostMask {
		return "", bad(fmt.Sprintf("longer than %d bytes", maxHostMask))
	}
	// The check runs on the mask with the longest port in it, and with the
	// shortest: each gives a name as long or as short as any port can.
	for _, port := range []string{"65535", "1"} {
		host := strings.ReplaceAll(mask, hostMaskPort, port)
		if strings.ContainsAny(host, "${}") {
			return "", bad("only " + hostMaskPort + " is replaced, and no other $, { or } may appear")
		}
		if err := checkMaskHost(host); err != nil {
			return "", bad(err.Error())
		}
	}
	return mask, nil
}

// checkMaskHost checks one Host value: name or address, optional port.
func checkMaskHost(host string) error {
	if host == "" {
		return fmt.Errorf("empty")
	}
	if !httpguts.ValidHostHeader(host) {
		return fmt.Errorf("not a valid Host header")
	}
	name := host
	if h, p, err := net.SplitHostPort(host); err == nil {
		n, perr := strconv.Atoi(p)
		if perr != nil || n < 1 || n > 65535 || p[0] == '0' {
			return fmt.Errorf("port %q is not 1-65535", p)
		}
		name = h
	} else if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return fmt.Errorf("not host or host:port")
	}
	if strings.HasPrefix(name, "[") && strings.HasSuffix(name, "]") {
		name = name[1 : len(name)-1]
	}
	if ip := net.ParseIP(name); ip != nil {
		return nil
	}
	if len(name) > 253 {
		return fmt.Errorf("host name longer than 253 bytes")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("host name label %q is empty or longer than 63 bytes", service.Clip(label))
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("host name has %q: letters, digits, - and _ only (punycode for international names)", string(c))
			}
		}
	}
	return nil
}
