package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/spacesandbox/space/internal/gateway"
	"github.com/spacesandbox/space/internal/node"
)

// gatewayFlags are the node's network gateway options, shared by `space
// node` and `space server --dev`.
type gatewayFlags struct {
	network     *bool
	egressNetns *string
	dnsUpstream *string
	upstreamCA  *string
}

func addGatewayFlags(fs *flag.FlagSet) *gatewayFlags {
	return &gatewayFlags{
		network:     fs.Bool("sandbox-network", true, "give every sandbox a network interface into this node's gateway, which enforces its egress policy (false: loopback only)"),
		egressNetns: fs.String("egress-netns", "", "network namespace (a file such as /run/netns/NAME) the gateway opens upstream connections and DNS queries from (default: the node's own; needs root)"),
		upstreamCA:  fs.String("gateway-upstream-ca", "", "PEM file of extra CA certificates the gateway trusts when it verifies the upstreams of intercepted (credential-injected) connections, besides the system roots"),
		dnsUpstream: fs.String("dns-upstream", "", "DNS server (HOST:PORT) the gateway asks for the sandboxes' queries (default: the first nameserver of /etc/resolv.conf)"),
	}
}

// config is the node's gateway configuration; nil when sandboxes have no
// network.
func (f *gatewayFlags) config() (*node.GatewayConfig, error) {
	if f == nil || !*f.network {
		return nil, nil
	}
	var dialer gateway.Dialer = &net.Dialer{}
	if *f.egressNetns != "" {
		if _, err := os.Stat(*f.egressNetns); err != nil {
			return nil, errors.New("--egress-netns: " + err.Error())
		}
		dialer = &gateway.NetnsDialer{Path: *f.egressNetns}
	}
	server := *f.dnsUpstream
	if server == "" {
		server = gateway.SystemDNSServer()
	}
	if server == "" {
		// Sandboxes still get a network (addresses by number work); every
		// name they ask for fails, and the log says why.
		fmt.Fprintln(os.Stderr, "warning: no DNS server for the sandboxes (/etc/resolv.conf names none): their name lookups will fail; pass --dns-upstream HOST:PORT")
		roots, err := f.roots()
		if err != nil {
			return nil, err
		}
		hostAddrs, err := gateway.HostAddrs()
		if err != nil {
			return nil, err
		}
		return &node.GatewayConfig{Dialer: dialer, Upstream: noUpstream{}, UpstreamRoots: roots, HostAddrs: hostAddrs}, nil
	}
	if _, _, err := net.SplitHostPort(server); err != nil {
		return nil, errors.New("--dns-upstream " + server + ": want HOST:PORT")
	}
	roots, err := f.roots()
	if err != nil {
		return nil, err
	}
	// The node's own addresses, in the namespace it runs in: a sandbox
	// never reaches the host, whatever its policy allows.
	hostAddrs, err := gateway.HostAddrs()
	if err != nil {
		return nil, err
	}
	return &node.GatewayConfig{
		HostAddrs:     hostAddrs,
		Dialer:        dialer,
		Upstream:      &gateway.DNSUpstream{Server: server, Dialer: dialer, Timeout: 3 * time.Second},
		UpstreamRoots: roots,
	}, nil
}

// roots is the system pool plus --gateway-upstream-ca; nil (the system
// roots) without the flag.
func (f *gatewayFlags) roots() (*x509.CertPool, error) {
	if *f.upstreamCA == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(*f.upstreamCA)
	if err != nil {
		return nil, errors.New("--gateway-upstream-ca: " + err.Error())
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("--gateway-upstream-ca " + *f.upstreamCA + ": no PEM certificate in it")
	}
	return pool, nil
}

// noUpstream fails every lookup: the node has no DNS server to ask.
type noUpstream struct{}

func (noUpstream) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "the node has no upstream DNS server (space node --dns-upstream)", Name: host}
}
