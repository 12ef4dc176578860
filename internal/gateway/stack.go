package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/gateway/dnsgw"
	"github.com/spacesandbox/space/internal/loglimit"
	"github.com/spacesandbox/space/internal/sandboxnet"
)

// Limits on one sandbox's flows.
const (
	// MaxFlows is the most TCP connections a sandbox may have open through
	// the gateway at once; more are refused with a RST.
	MaxFlows = 1024
	// maxPendingSYN bounds half-open connections the forwarder handles.
	maxPendingSYN = 256
	// dialTimeout bounds an upstream dial.
	dialTimeout = 10 * time.Second
	nicID       = 1
)

// sniffTimeout bounds the wait for a client's first bytes (a ClientHello or
// an HTTP request line) while the upstream says nothing either; a variable
// for tests. When the upstream speaks first (SSH, SMTP) the wait ends at
// once.
var sniffTimeout = 2 * time.Second

// Dialer opens upstream connections; *net.Dialer is one.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Interceptor serves a TLS flow whose host has a credential rule (see
// internal/gateway/intercept). Applies decides, per host, whether a flow is
// intercepted; Serve takes the client connection (its first bytes replayed)
// and an upstream dialer for the flow's destination.
type Interceptor interface {
	Applies(ctx context.Context, host string) bool
	Serve(ctx context.Context, client net.Conn, f Flow, dial func(context.Context) (net.Conn, error)) error
}

// Flow describes one TCP connection from the sandbox.
type Flow struct {
	// Dst is where the sandbox connected.
	Dst netip.AddrPort
	// Domain is the domain the connection was allowed for ("" for a
	// raw-address connection).
	Domain string
	// SNI is the TLS server name the client sent, if any.
	SNI string
}

// Config configures one sandbox's gateway.
type Config struct {
	// Sandbox and Execution name the sandbox in logs and counters.
	Sandbox, Execution string
	// Policy is the sandbox's egress policy, swapped live by the node.
	Policy *egress.Holder
	// Upstream resolves names for the sandbox's DNS queries.
	Upstream dnsgw.Upstream
	// Dialer opens upstream connections.
	Dialer Dialer
	// Interceptor, when set, serves TLS flows to hosts with a credential
	// rule.
	Interceptor Interceptor
	// HostAddrs are the node's own addresses: refused whatever the policy
	// says (a public address of the host is still the host).
	HostAddrs []netip.Addr
	// Internal is the deployment's internal-service list (control-plane
	// replicas, database, object store, nodes), shared by the node's
	// gateways and replaced live: those addresses are refused whatever the
	// policy says, and while the holder has no list yet every connection
	// is. nil: no list is checked (a gateway outside a node).
	Internal *egress.InternalHolder
	// Counters receives every decision; nil counts nowhere.
	Counters *Counters
	// DNSTotals receives every DNS query's decision (dnsgw); nil counts
	// only in the sandbox's DNS stats.
	DNSTotals *dnsgw.Totals
	// Log receives refusals (rate limited) and errors.
	Log *slog.Logger
}

// Sandbox is one sandbox's gateway: its stack, its link and its flows.
type Sandbox struct {
	cfg   Config
	log   *slog.Logger
	io    frameIO
	ep    *channel.Endpoint
	stack *stack.Stack
	dns   *dnsgw.Server
	names *dnsgw.NameTable
	logs  *loglimit.Limiter // refusal log lines, per reason

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	flows  chan struct{} // a token per open flow
	once   sync.Once
	done   chan struct{}
	err    error
}

// Attach starts the gateway of one sandbox on its link. The Sandbox owns
// the link from then on; Close releases both.
func Attach(link *driver.Link, cfg Config) (*Sandbox, error) {
	if cfg.Policy == nil || cfg.Upstream == nil || cfg.Dialer == nil {
		return nil, errors.New("gateway: Attach needs a policy, an upstream resolver and a dialer")
	}
	fio, err := newFrameIO(link)
	if err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "gateway", "sandbox", cfg.Sandbox, "exec", cfg.Execution)
	names := dnsgw.NewNameTable(0, nil)
	dns, err := dnsgw.New(dnsgw.Config{Policy: cfg.Policy, Upstream: cfg.Upstream, Names: names, Log: log, Totals: cfg.DNSTotals})
	if err != nil {
		fio.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Sandbox{
		cfg: cfg, log: log, io: fio, dns: dns, names: names, logs: loglimit.New(10),
		ctx: ctx, cancel: cancel, flows: make(chan struct{}, MaxFlows), done: make(chan struct{}),
	}
	if err := g.buildStack(); err != nil {
		cancel()
		fio.Close()
		return nil, err
	}
	if err := g.serveDNS(); err != nil {
		g.stack.Close()
		cancel()
		fio.Close()
		return nil, err
	}
	g.wg.Add(2)
	go g.inbound()
	go g.outbound()
	return g, nil
}

func (g *Sandbox) buildStack() error {
	s := stack.New(stack.Options{
		// No IPv6: the gateway has no IPv6 egress, and admitFrame refuses
		// every IPv6 frame before it could reach a stack that knew it.
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
		HandleLocal:        false,
	})
	g.stack = s
	// The gateway usually closes first (the upstream ended), so its side of
	// a flow sits in TIME_WAIT while the guest, which did not, may reuse the
	// port at once: a SYN into a TIME_WAIT endpoint is dropped and the
	// guest's connection hangs. On a private point-to-point link with no
	// reordering and no old duplicates, a short TIME_WAIT is safe.
	tw := tcpip.TCPTimeWaitTimeoutOption(time.Second)
	if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &tw); err != nil {
		return fmt.Errorf("gateway: TIME_WAIT: %s", err)
	}
	sack := tcpip.TCPSACKEnabled(true)
	_ = s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	// The queue toward the guest holds what the stack sends while the
	// outbound pump waits for the link. A packet that finds it full is
	// dropped and its flow backs off for a retransmission timeout: on a
	// busy node (the pump starved of CPU) a short queue turns a download
	// into a crawl of retransmissions. The test guest's queue of 256 did
	// that to uploads (hundreds of retransmissions of one 3 MiB upload
	// with the CPU taken by others, past the 30 s of
	// gateway.TestHTTPFlowKeepAliveWorks in CI; a few with 1,024). It costs
	// memory only while full: at most 1,024 frames, 1.5 MiB.
	g.ep = channel.New(outboundQueueFrames, sandboxnet.MTU+header.EthernetMinimumSize, tcpip.LinkAddress(sandboxnet.GatewayMAC))
	if err := s.CreateNICWithOptions(nicID, ethernet.New(g.ep), stack.NICOptions{Name: "sandbox"}); err != nil {
		return fmt.Errorf("gateway: create NIC: %s", err)
	}
	for _, a := range []netip.Addr{sandboxnet.Gateway, sandboxnet.DNS} {
		pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddrFrom4(a.As4()).WithPrefix()}
		if err := s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); err != nil {
			return fmt.Errorf("gateway: address %s: %s", a, err)
		}
	}
	// Every destination is "local" to the stack so that the forwarders see
	// every flow; none is ever routed anywhere.
	if err := s.SetPromiscuousMode(nicID, true); err != nil {
		return fmt.Errorf("gateway: promiscuous mode: %s", err)
	}
	if err := s.SetSpoofing(nicID, true); err != nil {
		return fmt.Errorf("gateway: spoofing: %s", err)
	}
	s.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
	})
	tf := tcp.NewForwarder(s, 0, maxPendingSYN, g.admitTCP)
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, g.countPendingSYNDrops(tf.HandlePacket))
	uf := udp.NewForwarder(s, g.refuseUDP)
	s.SetTransportProtocolHandler(udp.ProtocolNumber, uf.HandlePacket)
	return nil
}

// countPendingSYNDrops wraps the TCP forwarder's packet handler: a SYN it
// dropped because maxPendingSYN connection requests were already being
// decided (a SYN flood, or upstreams slow to answer) is counted as
// ReasonPendingSYN. The forwarder drops it silently; the sandbox's TCP
// retransmits it later, as after any lost SYN. Frames come in one at a
// time (inbound), so the stack's drop counter moving during the call is
// this packet's drop.
func (g *Sandbox) countPendingSYNDrops(handle func(stack.TransportEndpointID, *stack.PacketBuffer) bool) func(stack.TransportEndpointID, *stack.PacketBuffer) bool {
	drops := g.stack.Stats().TCP.ForwardMaxInFlightDrop
	return func(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
		before := drops.Value()
		handled := handle(id, pkt)
		if drops.Value() != before {
			dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
			g.refused(ReasonPendingSYN, dst, "", "too many connection requests being decided at once ("+strconv.Itoa(maxPendingSYN)+"); the SYN was dropped")
		}
		return handled
	}
}

// inboundBuffer is the size of the buffer inbound reads each frame into:
// maxFrame, the largest a stream link carries. A tap's read cuts a longer
// frame to the buffer, so the buffer must stay longer than the largest frame
// admission lets through (maxLinkFrame): a cut frame is then still longer
// than that and refused as oversize, where a buffer of maxLinkFrame would
// hand the stack the first maxLinkFrame bytes of a jumbo frame as a whole
// one (TestTapFrameLongerThanTheBufferRefused). It was 64 KiB, held by every
// sandbox's gateway in the node for frames of at most 1.5 KiB.
const inboundBuffer = maxFrame

// inbound moves frames from the guest into the stack.
func (g *Sandbox) inbound() {
	defer g.wg.Done()
	buf := make([]byte, inboundBuffer)
	for {
		frame, err := g.io.ReadFrame(buf)
		if err != nil {
			g.finish(err)
			return
		}
		if !g.admitFrame(frame) {
			continue
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(append([]byte(nil), frame...))})
		g.ep.InjectInbound(0, pkt)
		pkt.DecRef()
	}
}

// outboundQueueFrames is the length of the stack's queue toward the guest.
const outboundQueueFrames = 1024

// outbound moves frames from the stack to the guest.
func (g *Sandbox) outbound() {
	defer g.wg.Done()
	for {
		pkt := g.ep.ReadContext(g.ctx)
		if pkt == nil {
			return
		}
		view := pkt.ToView()
		pkt.DecRef()
		err := g.io.WriteFrame(view.AsSlice())
		view.Release()
		if err != nil {
			g.finish(err)
			return
		}
	}
}

// serveDNS answers UDP queries to sandboxnet.DNS:53.
func (g *Sandbox) serveDNS() error {
	addr := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(sandboxnet.DNS.As4()), Port: 53}
	pc, err := gonet.DialUDP(g.stack, &addr, nil, ipv4.ProtocolNumber)
	if err != nil {
		return fmt.Errorf("gateway: DNS socket: %w", err)
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		<-g.ctx.Done()
		pc.Close()
	}()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			reply := g.dns.Answer(g.ctx, buf[:n])
			if reply != nil {
				_, _ = pc.WriteTo(reply, from)
			}
		}
	}()
	return nil
}

// refuseUDP drops every UDP datagram not addressed to the DNS socket: UDP
// egress (QUIC, other DNS servers, anything) is not offered. A query to
// another resolver is counted apart (ReasonDNSResolver), as an attempt to
// go around the gateway's DNS.
func (g *Sandbox) refuseUDP(r *udp.ForwarderRequest) {
	id := r.ID()
	dst := netip.AddrPortFrom(addrOf(id.LocalAddress), id.LocalPort)
	if why, ok := g.internalService(dst.Addr()); ok {
		g.refused(ReasonInternalService, dst, "", why)
		return
	}
	if isDNSPort(dst.Port()) {
		g.refused(ReasonDNSResolver, dst, "", "DNS is answered by the gateway only ("+sandboxnet.DNS.String()+":53)")
		return
	}
	g.refused(ReasonUDP, dst, "", "UDP egress is not offered (only DNS to the gateway)")
}

// DNSStats returns the sandbox's DNS counters.
func (g *Sandbox) DNSStats() dnsgw.Stats { return g.dns.Stats() }

// Done is closed when the gateway stopped (Close, or the link ended).
func (g *Sandbox) Done() <-chan struct{} { return g.done }

// Close stops the gateway: every flow is cut, the stack and the link are
// released. It waits for its goroutines.
func (g *Sandbox) Close() error {
	g.finish(nil)
	g.wg.Wait()
	return nil
}

func (g *Sandbox) finish(err error) {
	g.once.Do(func() {
		g.err = err
		g.cancel()
		g.io.Close()
		g.ep.Close()
		g.stack.Close()
		close(g.done)
	})
}

func addrOf(a tcpip.Address) netip.Addr {
	ad, _ := netip.AddrFromSlice(a.AsSlice())
	return ad.Unmap()
}

// DialGuest opens a TCP connection from the gateway to port on the guest
// (ServicePort ingress): it arrives from sandboxnet.Gateway, through the
// sandbox's own link, so it needs nothing of the host's network. The caller
// has checked the capability for this execution, port and protocol.
func (g *Sandbox) DialGuest(ctx context.Context, port uint16) (net.Conn, error) {
	select {
	case <-g.done:
		return nil, errors.New("gateway: stopped")
	default:
	}
	local := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(sandboxnet.Gateway.As4())}
	remote := tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(sandboxnet.GuestPrefix.Addr().As4()), Port: port}
	c, err := gonet.DialTCPWithBind(ctx, g.stack, local, remote, ipv4.ProtocolNumber)
	if err != nil {
		return nil, fmt.Errorf("gateway: connect to guest port %d: %w", port, err)
	}
	return c, nil
}
