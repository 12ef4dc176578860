package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/sandboxnet"
)

// forwardTCP decides one connection request from the sandbox.
func (g *Sandbox) forwardTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
	switch {
	case dst.Addr() == sandboxnet.DNS && dst.Port() == 53:
		g.refused(ReasonDNSOverTCP, dst, "", "DNS over TCP is not offered; use UDP")
		r.Complete(true)
		return
	case dst.Addr() == sandboxnet.Gateway || dst.Addr() == sandboxnet.DNS:
		g.refused(ReasonGatewayAddr, dst, "", "the gateway serves no TCP")
		r.Complete(true)
		return
	}
	select {
	case g.flows <- struct{}{}:
	default:
		g.refused(ReasonFlowLimit, dst, "", "too many open connections ("+strconv.Itoa(MaxFlows)+")")
		r.Complete(true)
		return
	}
	release := func() { <-g.flows }
	if reason, why, ok := g.deploymentAddr(dst.Addr()); ok {
		release()
		g.refused(reason, dst, "", why)
		r.Complete(true)
		return
	}
	d, c := decide(g.cfg.Policy.Load(), dst, g.names.Domains(dst.Addr()))
	domain := c.initial()
	if !d.Allow {
		release()
		g.refused(ReasonPolicy, dst, domain, d.Reason)
		r.Complete(true)
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, dialTimeout)
	up, err := g.cfg.Dialer.DialContext(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		release()
		g.refused(ReasonUnreachable, dst, domain, err.Error())
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		release()
		up.Close()
		r.Complete(true)
		return
	}
	r.Complete(false)
	client := gonet.NewTCPConn(&wq, ep)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer release()
		g.serveFlow(client, up, Flow{Dst: dst, Domain: domain}, c)
	}()
}

// candidates is what a connection the policy allowed may be for: the names
// the sandbox resolved to its address through the gateway that the policy
// allows on its port, and whether the raw address is allowed as well. The
// client's first bytes (SNI, Host) pick one of them (forName).
type candidates struct {
	names []string
	raw   bool
}

// initial is the domain a flow is logged with before its first bytes: the
// first allowed name, else none.
func (c candidates) initial() string {
	if len(c.names) > 0 {
		return c.names[0]
	}
	return ""
}

// forName is the domain a flow whose client presented name (an SNI or a
// Host, "" for none) is for: that name when it is one of the allowed names
// (several names share an address on a CDN), else the raw address when it
// is allowed (the name is then checked against the deny domains only, as on
// any raw-address flow), else the first allowed name, whose check refuses
// the flow and says why.
func (c candidates) forName(name string) string {
	n := strings.ToLower(strings.TrimSuffix(hostOnly(name), "."))
	for _, d := range c.names {
		if d == n {
			return d
		}
	}
	if c.raw {
		return ""
	}
	return c.initial()
}

// hostOnly strips a port from an HTTP Host ("a.test:8080", "[::1]:80").
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

// decide decides a connection to dst by the policy, for each of the names
// the sandbox resolved to dst through the gateway and for the raw address:
// it is allowed when any of them is, and the allowed ones are its
// candidates. A refusal gives the reason of the first name (or of the raw
// address when there is none).
func decide(p *egress.Policy, dst netip.AddrPort, domains []string) (egress.Decision, candidates) {
	var c candidates
	var first, allowed egress.Decision
	for i, name := range domains {
		d := p.AllowConnection(dst.Addr(), dst.Port(), name)
		if d.Allow {
			if len(c.names) == 0 {
				allowed = d
			}
			c.names = append(c.names, name)
		}
		if i == 0 {
			first = d
		}
	}
	raw := p.AllowConnection(dst.Addr(), dst.Port(), "")
	c.raw = raw.Allow
	switch {
	case len(c.names) > 0:
		return allowed, c
	case raw.Allow || len(domains) == 0:
		return raw, c
	}
	return first, candidates{names: domains[:1]}
}

// serveFlow sniffs the client's first bytes, checks them against the domain
// the flow was allowed for, and splices (or intercepts) it: a plaintext
// HTTP flow request by request, a TLS flow record by record. A flow is
// counted allowed when it is opened; a refusal later in it is counted too.
func (g *Sandbox) serveFlow(client net.Conn, up net.Conn, f Flow, c candidates) {
	defer client.Close()
	stop := context.AfterFunc(g.ctx, func() { client.Close(); up.Close() })
	defer stop()
	first, upHead, err := sniffOrServerFirst(client, up)
	// Neither side spoke within the sniff deadline: the flow is not one
	// where the server speaks first, so the client's first bytes, whenever
	// they come, decide it as usual. A client waiting out the deadline must
	// not get an unchecked splice (a late request with another Host, a late
	// ClientHello with another SNI).
	for errors.Is(err, errSilent) && len(upHead) == 0 {
		first, upHead, err = sniffOrServerFirst(client, up)
	}
	if err != nil && !errors.Is(err, errNothingSent) {
		up.Close()
		g.refused(ReasonSniffFailure, f.Dst, f.Domain, err.Error())
		return
	}
	if len(upHead) > 0 {
		up = &replayConn{Conn: up, head: upHead}
	}
	if first.kind == kindTLS {
		f.Domain = c.forName(first.name)
	}
	pol := g.cfg.Policy.Load()
	if first.kind == kindTLS {
		f.SNI = first.name
		if d := pol.CheckSNI(f.Domain, first.name); !d.Allow {
			up.Close()
			g.refused(ReasonSNI, f.Dst, f.Domain, d.Reason)
			return
		}
	}
	replay := &replayConn{Conn: client, head: first.raw}
	if first.kind == kindTLS && g.cfg.Interceptor != nil && first.name != "" && g.cfg.Interceptor.Applies(g.ctx, first.name) {
		g.cfg.Counters.add(g.cfg.Sandbox, ReasonIntercepted)
		// The first request uses the connection dialled for the decision;
		// after the upstream closed one, the interceptor dials the same
		// decided destination again.
		first := up
		dial := func(ctx context.Context) (net.Conn, error) {
			if c := first; c != nil {
				first = nil
				return c, nil
			}
			ctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			return g.cfg.Dialer.DialContext(ctx, "tcp", f.Dst.String())
		}
		if err := g.cfg.Interceptor.Serve(g.ctx, replay, f, dial); err != nil {
			g.log.Debug("intercepted flow ended", "dst", f.Dst, "sni", f.SNI, "err", err)
		}
		up.Close()
		return
	}
	g.cfg.Counters.add(g.cfg.Sandbox, ReasonAllowed)
	refuse := func(r *flowRefusal) { g.refused(r.reason, f.Dst, f.Domain, r.why) }
	switch first.kind {
	case kindHTTP:
		gate := newUpgradeGate()
		spliceGuarded(replay, up, refuse, func(dst io.Writer, src io.Reader) error {
			return copyRequests(dst, src, hostChecker(g.cfg.Policy, c), gate)
		}, gate.copyResponses)
	case kindTLS:
		spliceGuarded(replay, up, refuse, func(dst io.Writer, src io.Reader) error {
			return copyTLSRecords(dst, src, first.name)
		}, nil)
	default:
		splice(replay, up)
	}
}

// hostChecker decides each request's Host on a flow with the current
// policy. The first request's Host picks the domain the flow is for among
// its candidates (forName); every later one must name the same. The last
// name allowed, under the same policy, is not decided again: a keep-alive
// flow repeats one Host.
func hostChecker(h *egress.Holder, c candidates) func(string) error {
	var (
		chosen     bool
		domain     string
		allowed    bool
		lastPolicy *egress.Policy
		lastHost   string
	)
	return func(host string) error {
		if !chosen {
			domain, chosen = c.forName(host), true
		}
		p := h.Load()
		if allowed && p == lastPolicy && host == lastHost {
			return nil
		}
		allowed = false
		if d := p.CheckHost(domain, host); !d.Allow {
			return &flowRefusal{ReasonHost, d.Reason}
		}
		allowed, lastPolicy, lastHost = true, p, host
		return nil
	}
}

// spliceGuarded is splice with the client→upstream direction copied by
// guard, which decides what of the client's stream is forwarded, and the
// other by answers (nil: a plain copy). A guard's
// refusal (*flowRefusal) is given to refuse and ends the flow: nothing more
// of the client's is forwarded, the upstream's write side is closed so that
// it answers what was forwarded before (pipelined requests that were
// allowed) and closes, within refusalDrain, and then both ends are closed.
func spliceGuarded(client, up net.Conn, refuse func(*flowRefusal), guard, answers func(dst io.Writer, src io.Reader) error) {
	if answers == nil {
		answers = func(dst io.Writer, src io.Reader) error { _, err := io.Copy(dst, src); return err }
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = answers(client, up)
		if cw, ok := client.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			client.Close()
		}
	}()
	err := guard(up, client)
	if r := (*flowRefusal)(nil); errors.As(err, &r) {
		refuse(r)
		up.SetReadDeadline(time.Now().Add(refusalDrain))
	}
	if cw, ok := up.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		up.Close()
	}
	<-done
	client.Close()
	up.Close()
}

// refusalDrain bounds how long a refused flow's upstream may take to answer
// the requests forwarded before the refusal.
const refusalDrain = 5 * time.Second

// sniffOrServerFirst sniffs the client's first bytes (sniff), unless the
// upstream speaks first: then the client, waiting for it, will send nothing
// first (SSH, SMTP banners) and the sniff ends at once with errNothingSent
// instead of at sniffTimeout. upHead is what the upstream sent meanwhile,
// to be replayed to the client.
func sniffOrServerFirst(client, up net.Conn) (first firstBytes, upHead []byte, err error) {
	type read struct {
		b   []byte
		err error
	}
	upc := make(chan read, 1)
	go func() {
		b := make([]byte, 16<<10)
		n, err := up.Read(b)
		upc <- read{b[:n], err}
	}()
	type sniffed struct {
		first firstBytes
		err   error
	}
	sc := make(chan sniffed, 1)
	client.SetReadDeadline(time.Now().Add(sniffTimeout))
	go func() {
		first, err := sniff(client)
		sc <- sniffed{first, err}
	}()
	var r read
	var s sniffed
	select {
	case s = <-sc:
		// The usual case: stop the upstream read, keeping whatever raced in.
		up.SetReadDeadline(time.Now())
		r = <-upc
		up.SetReadDeadline(time.Time{})
	case r = <-upc:
		client.SetReadDeadline(time.Now())
		s = <-sc
	}
	client.SetReadDeadline(time.Time{})
	if r.err != nil && len(r.b) == 0 && !isTimeout(r.err) {
		// The upstream ended before anything was said; the splice sees it.
		return s.first, nil, s.err
	}
	return s.first, r.b, s.err
}

// isTimeout reports whether err is a deadline's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// splice copies both ways until both directions end, half-closing as each
// side finishes.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// replayConn reads head before the connection's own bytes.
type replayConn struct {
	net.Conn
	head []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// refused counts a refusal, and logs it within the sandbox's log budget (a
// sandbox scanning the internet must not fill the node's log; the counters
// have every refusal).
func (g *Sandbox) refused(reason string, dst netip.AddrPort, domain, why string) {
	g.cfg.Counters.add(g.cfg.Sandbox, reason)
	suppressed, ok := g.logs.Allow(reason, time.Now())
	if !ok {
		return
	}
	g.log.Info("egress refused", "reason", reason, "dst", dst, "domain", domain, "why", why, "unlogged_since_last", suppressed)
}
