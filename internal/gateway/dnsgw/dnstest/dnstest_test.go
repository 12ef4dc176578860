package dnstest

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

func start(t *testing.T) *Server {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Start(pc, map[string][]netip.Addr{
		"both.test.example.":  {netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")},
		"Only4.Test.Example":  {netip.MustParseAddr("192.0.2.4")},
		"empty.test.example.": nil,
	})
	t.Cleanup(s.Close)
	return s
}

func TestResolver(t *testing.T) {
	s := start(t)
	r := s.Resolver()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // deadlock guard only
	defer cancel()

	got, err := r.LookupNetIP(ctx, "ip4", "both.test.example.")
	if err != nil || !slices.Equal(got, []netip.Addr{netip.MustParseAddr("192.0.2.1")}) {
		t.Errorf("ip4 both: got %v, %v; want [192.0.2.1]", got, err)
	}
	got, err = r.LookupNetIP(ctx, "ip6", "BOTH.test.example.")
	if err != nil || !slices.Equal(got, []netip.Addr{netip.MustParseAddr("2001:db8::1")}) {
		t.Errorf("ip6 both: got %v, %v; want [2001:db8::1]", got, err)
	}
	got, err = r.LookupNetIP(ctx, "ip4", "only4.test.example.")
	if err != nil || !slices.Equal(got, []netip.Addr{netip.MustParseAddr("192.0.2.4")}) {
		t.Errorf("ip4 only4: got %v, %v; want [192.0.2.4]", got, err)
	}
	for _, c := range []struct{ network, name string }{
		{"ip6", "only4.test.example."}, // no records of the type
		{"ip4", "missing.test.example."},
		{"ip4", "empty.test.example."},
	} {
		_, err := r.LookupNetIP(ctx, c.network, c.name)
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Errorf("%s %s: got error %v, want a not-found DNSError", c.network, c.name, err)
		}
	}
	if n := s.Queries("both.test.example"); n != 2 {
		t.Errorf("Queries(both) = %d, want 2", n)
	}
	if n := s.Queries("MISSING.test.example."); n != 1 {
		t.Errorf("Queries(missing) = %d, want 1", n)
	}
	if n := s.Queries("never.test.example"); n != 0 {
		t.Errorf("Queries(never) = %d, want 0", n)
	}
}

func TestRcodes(t *testing.T) {
	s := start(t)
	conn, err := net.Dial("udp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, c := range []struct {
		name    string
		typ     dnsmessage.Type
		rcode   dnsmessage.RCode
		answers int
	}{
		{"only4.test.example.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, 1},
		{"only4.test.example.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, 0},
		{"only4.test.example.", dnsmessage.TypeTXT, dnsmessage.RCodeSuccess, 0},
		{"nope.test.example.", dnsmessage.TypeA, dnsmessage.RCodeNameError, 0},
	} {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 77, RecursionDesired: true})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(c.name), Type: c.typ, Class: dnsmessage.ClassINET})
		q, err := b.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write(q); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // deadlock guard only
		buf := make([]byte, 1500)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		var m dnsmessage.Message
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatal(err)
		}
		if m.ID != 77 || m.RCode != c.rcode || len(m.Answers) != c.answers || !m.RecursionAvailable {
			t.Errorf("%s %v: got id %d rcode %v %d answers RA %v; want id 77 rcode %v %d answers RA true",
				c.name, c.typ, m.ID, m.RCode, len(m.Answers), m.RecursionAvailable, c.rcode, c.answers)
		}
	}
}

func TestCloseStopsServing(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Start(pc, nil)
	s.Close() // returns only once the serving goroutine has
	if _, _, err := pc.ReadFrom(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("PacketConn after Close: ReadFrom error %v, want net.ErrClosed", err)
	}
}
