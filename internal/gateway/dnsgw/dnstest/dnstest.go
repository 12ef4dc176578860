// Package dnstest is a tiny authoritative-style DNS server for tests: it
// answers A and AAAA queries from a fixed table over a PacketConn the test
// opened (on 127.0.0.1, or inside a test network namespace) and counts the
// queries it received per name.
//
// Names in the table are matched case-insensitively, with or without a
// trailing dot. A name in the table gets its addresses of the asked family,
// or NOERROR with no answers when it has none of that family or the type
// is not A or AAAA; any other name gets NXDOMAIN.
package dnstest

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// Server serves DNS on one PacketConn until Close.
type Server struct {
	pc      net.PacketConn
	records map[string][]netip.Addr
	done    chan struct{}

	mu      sync.Mutex // guards queries
	queries map[string]int
}

// Start serves records on pc in a goroutine and returns at once. The
// Server owns pc from then on; Close closes it. records is copied.
func Start(pc net.PacketConn, records map[string][]netip.Addr) *Server {
	s := &Server{
		pc:      pc,
		records: make(map[string][]netip.Addr, len(records)),
		done:    make(chan struct{}),
		queries: make(map[string]int),
	}
	for name, addrs := range records {
		s.records[normalize(name)] = append([]netip.Addr(nil), addrs...)
	}
	go s.serve()
	return s
}

// Addr returns the address the Server listens on.
func (s *Server) Addr() net.Addr { return s.pc.LocalAddr() }

// Resolver returns a pure-Go resolver that sends every query to s over
// UDP, whatever /etc/resolv.conf names. It still reads /etc/hosts first,
// as every net.Resolver does; tests should use names not listed there.
func (s *Server) Resolver() *net.Resolver {
	addr := s.Addr().String()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", addr)
		},
	}
}

// Queries returns how many queries for name (any type, any case, with or
// without a trailing dot) the Server received.
func (s *Server) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[normalize(name)]
}

// Close stops the Server, closes its PacketConn and waits for the serving
// goroutine to return.
func (s *Server) Close() {
	s.pc.Close()
	<-s.done
}

func (s *Server) serve() {
	defer close(s.done)
	buf := make([]byte, 65535)
	for {
		n, from, err := s.pc.ReadFrom(buf)
		if err != nil {
			return // closed, or the socket is broken: a test server stops
		}
		if reply := s.answer(buf[:n]); reply != nil {
			s.pc.WriteTo(reply, from) // best effort, like any UDP server
		}
	}
}

// answer builds the reply to one message, or nil to drop it.
func (s *Server) answer(msg []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := normalize(q.Name.String())
	s.mu.Lock()
	s.queries[name]++
	s.mu.Unlock()

	addrs, known := s.records[name]
	rcode := dnsmessage.RCodeSuccess
	if !known {
		rcode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{
		ID: h.ID, Response: true, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rcode,
	})
	b.EnableCompression()
	if b.StartQuestions() != nil || b.Question(q) != nil || b.StartAnswers() != nil {
		return nil
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 30}
	for _, a := range addrs {
		switch {
		case q.Type == dnsmessage.TypeA && a.Unmap().Is4():
			err = b.AResource(rh, dnsmessage.AResource{A: a.Unmap().As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6() && !a.Is4In6():
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil
		}
	}
	reply, err := b.Finish()
	if err != nil {
		return nil
	}
	return reply
}

func normalize(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}
