package dnsgw

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/spacesandbox/space/internal/egress"
)

// fakeUpstream answers from a map keyed by lowercase name without the
// trailing dot, like net.Resolver: a name that is missing or has no
// address of the asked family is a not-found DNSError.
type fakeUpstream struct {
	records map[string][]netip.Addr
	errs    map[string]error // returned instead of looking up the name
	errsFor string           // when set, errs apply to this network only

	mu    sync.Mutex // guards calls
	calls []string   // "network host"
}

func (f *fakeUpstream) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	f.calls = append(f.calls, network+" "+host)
	f.mu.Unlock()
	key := strings.TrimSuffix(host, ".")
	if err, ok := f.errs[key]; ok && (f.errsFor == "" || f.errsFor == network) {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range f.records[key] {
		if (network == "ip4") == a.Unmap().Is4() {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

func (f *fakeUpstream) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func mustPolicy(t testing.TB, s egress.Spec) *egress.Policy {
	t.Helper()
	p, err := egress.NewPolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var testRecords = map[string][]netip.Addr{
	"example.com": {
		netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("93.184.215.15"),
		netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c"),
	},
	"api.example.com":      {netip.MustParseAddr("198.51.100.7")},
	"only4.example.com":    {netip.MustParseAddr("198.51.100.4")},
	"only6.example.com":    {netip.MustParseAddr("2001:db8::6")},
	"private.example.com":  {netip.MustParseAddr("10.0.0.5")},
	"mapped.example.com":   {netip.MustParseAddr("::ffff:198.51.100.9")},
	"evil.example.com":     {netip.MustParseAddr("203.0.113.66")},
	"sub.evil.example.org": {netip.MustParseAddr("203.0.113.67")},
}

type testEnv struct {
	srv   *Server
	up    *fakeUpstream
	names *NameTable
	pol   *egress.Holder
	clk   *fakeClock
	logs  *bytes.Buffer
}

// newTestEnv returns a Server over testRecords allowing the internet, with
// a fake clock and debug logs in a buffer. mod may change the Config.
func newTestEnv(t testing.TB, mod func(*Config)) *testEnv {
	t.Helper()
	e := &testEnv{
		up:   &fakeUpstream{records: testRecords},
		clk:  newFakeClock(),
		logs: &bytes.Buffer{},
		pol:  egress.NewHolder(mustPolicy(t, egress.Spec{AllowInternet: true})),
	}
	e.names = NewNameTable(0, e.clk.now)
	cfg := Config{
		Policy: e.pol, Upstream: e.up, Names: e.names, Now: e.clk.now,
		Log: slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	return e
}

// query builds a standard query with RD set.
func query(t testing.TB, id uint16, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	return queryWith(t, dnsmessage.Header{ID: id, RecursionDesired: true}, name, typ, dnsmessage.ClassINET)
}

func queryWith(t testing.TB, h dnsmessage.Header, name string, typ dnsmessage.Type, class dnsmessage.Class) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, h)
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	n, err := dnsmessage.NewName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: n, Type: typ, Class: class}); err != nil {
		t.Fatal(err)
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// answer runs Answer and unpacks the reply, failing on nil or garbage.
func (e *testEnv) answer(t testing.TB, q []byte) dnsmessage.Message {
	t.Helper()
	r := e.srv.Answer(context.Background(), q)
	if r == nil {
		t.Fatal("Answer returned nil")
	}
	if len(r) > MaxMessageSize {
		t.Fatalf("reply is %d bytes, more than %d", len(r), MaxMessageSize)
	}
	var m dnsmessage.Message
	if err := m.Unpack(r); err != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	return m
}

// answerAddrs returns the addresses of m's A and AAAA records.
func answerAddrs(m dnsmessage.Message) []netip.Addr {
	var out []netip.Addr
	for _, rr := range m.Answers {
		switch b := rr.Body.(type) {
		case *dnsmessage.AResource:
			out = append(out, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			out = append(out, netip.AddrFrom16(b.AAAA))
		}
	}
	return out
}

var errBoom = errors.New("boom")
