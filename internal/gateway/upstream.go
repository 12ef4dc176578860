package gateway

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// DNSUpstream resolves names by asking one DNS server over UDP through a
// Dialer. Unlike net.Resolver it never reads the host's /etc/hosts, never
// appends search domains and never falls back to another server: a sandbox
// learns only what that server answers.
type DNSUpstream struct {
	// Server is the resolver's address, "host:port".
	Server string
	// Dialer reaches it.
	Dialer Dialer
	// Timeout bounds one exchange; default 3s.
	Timeout time.Duration
}

// LookupNetIP implements dnsgw.Upstream: network is "ip4" or "ip6".
func (u *DNSUpstream) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	qtype := dnsmessage.TypeA
	switch network {
	case "ip4":
	case "ip6":
		qtype = dnsmessage.TypeAAAA
	default:
		return nil, fmt.Errorf("gateway: DNS upstream: network %q: want ip4 or ip6", network)
	}
	if !strings.HasSuffix(host, ".") {
		host += "."
	}
	name, err := dnsmessage.NewName(host)
	if err != nil {
		return nil, &net.DNSError{Err: err.Error(), Name: host}
	}
	timeout := u.Timeout
	if timeout <= 0 {
		timeout = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var idb [2]byte
	if _, err := randRead(idb[:]); err != nil {
		return nil, err
	}
	id := uint16(idb[0])<<8 | uint16(idb[1])
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: id, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: name, Type: qtype, Class: dnsmessage.ClassINET}},
	}
	msg, err := q.Pack()
	if err != nil {
		return nil, err
	}
	c, err := u.Dialer.DialContext(ctx, "udp", u.Server)
	if err != nil {
		return nil, &net.DNSError{Err: err.Error(), Name: host, Server: u.Server, IsTemporary: true}
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	if _, err := c.Write(msg); err != nil {
		return nil, &net.DNSError{Err: err.Error(), Name: host, Server: u.Server, IsTemporary: true}
	}
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, &net.DNSError{Err: err.Error(), Name: host, Server: u.Server, IsTimeout: errors.Is(err, os.ErrDeadlineExceeded)}
		}
		addrs, done, err := parseAnswer(buf[:n], id, name, qtype)
		if !done {
			continue // not our answer: keep waiting
		}
		if err != nil {
			return nil, &net.DNSError{Err: err.Error(), Name: host, Server: u.Server, IsNotFound: errors.Is(err, errNoSuchHost)}
		}
		return addrs, nil
	}
}

var errNoSuchHost = errors.New("no such host")

// parseAnswer reads a reply; done is false when it is not the reply to our
// question (wrong id or question), which the caller ignores.
func parseAnswer(b []byte, id uint16, name dnsmessage.Name, qtype dnsmessage.Type) (addrs []netip.Addr, done bool, err error) {
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil || h.ID != id || !h.Response {
		return nil, false, nil
	}
	q, err := p.Question()
	if err != nil || !strings.EqualFold(q.Name.String(), name.String()) || q.Type != qtype {
		return nil, false, nil
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, true, err
	}
	switch h.RCode {
	case dnsmessage.RCodeSuccess:
	case dnsmessage.RCodeNameError:
		return nil, true, errNoSuchHost
	default:
		return nil, true, fmt.Errorf("server answered %v", h.RCode)
	}
	for {
		ah, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return nil, true, err
		}
		switch {
		case ah.Type == dnsmessage.TypeA && qtype == dnsmessage.TypeA:
			r, err := p.AResource()
			if err != nil {
				return nil, true, err
			}
			addrs = append(addrs, netip.AddrFrom4(r.A))
		case ah.Type == dnsmessage.TypeAAAA && qtype == dnsmessage.TypeAAAA:
			r, err := p.AAAAResource()
			if err != nil {
				return nil, true, err
			}
			addrs = append(addrs, netip.AddrFrom16(r.AAAA))
		default:
			if err := p.SkipAnswer(); err != nil {
				return nil, true, err
			}
		}
	}
	if len(addrs) == 0 {
		return nil, true, errNoSuchHost
	}
	return addrs, true, nil
}

// NetnsDialer dials from inside another network namespace (the file at
// Path, e.g. /run/netns/NAME): the gateway's upstream connections leave
// through that namespace's interfaces and routes only. It needs
// CAP_SYS_ADMIN (the node runs it as root in --dev; an unprivileged node
// uses the namespace it was started in instead).
type NetnsDialer struct {
	Path string
	net.Dialer
}

// DialContext opens the socket on a thread that has joined the namespace;
// the connection stays in that namespace for its life.
func (d *NetnsDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		target, err := unix.Open(d.Path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("gateway: egress namespace %s: %w", d.Path, err)}
			return
		}
		defer unix.Close(target)
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("gateway: own network namespace: %w", err)}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("gateway: join egress namespace %s: %w", d.Path, err)}
			return
		}
		c, err := d.Dialer.DialContext(ctx, network, address)
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// SystemDNSServer returns the first nameserver of /etc/resolv.conf as
// "host:53", or "" when there is none.
func SystemDNSServer() string {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil {
				return netip.AddrPortFrom(a, 53).String()
			}
		}
	}
	return ""
}

func randRead(b []byte) (int, error) { return cryptorand.Read(b) }

// HostAddrs lists the addresses of this network namespace's interfaces
// (unmapped), for Config.HostAddrs.
func HostAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("gateway: the node's addresses: %w", err)
	}
	var out []netip.Addr
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap().WithZone(""))
		}
	}
	return out, nil
}
