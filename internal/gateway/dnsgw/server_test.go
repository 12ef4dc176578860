package dnsgw

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
)

func TestAnswerA(t *testing.T) {
	e := newTestEnv(t, nil)
	m := e.answer(t, query(t, 0xbeef, "ExAmPle.CoM.", dnsmessage.TypeA))

	if m.ID != 0xbeef || !m.Response || !m.RecursionDesired || !m.RecursionAvailable || m.RCode != dnsmessage.RCodeSuccess {
		t.Fatalf("header %+v: want ID 0xbeef, QR, RD, RA, NOERROR", m.Header)
	}
	if len(m.Questions) != 1 || m.Questions[0].Name.String() != "ExAmPle.CoM." ||
		m.Questions[0].Type != dnsmessage.TypeA || m.Questions[0].Class != dnsmessage.ClassINET {
		t.Fatalf("questions %v: want the query's question echoed with its case", m.Questions)
	}
	want := []netip.Addr{netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("93.184.215.15")}
	if got := answerAddrs(m); !slices.Equal(got, want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	for _, rr := range m.Answers {
		if rr.Header.TTL != 60 || rr.Header.Name.String() != "ExAmPle.CoM." || rr.Header.Class != dnsmessage.ClassINET {
			t.Errorf("record header %+v: want TTL 60, the question name, class IN", rr.Header)
		}
	}
	if len(m.Authorities) != 0 || len(m.Additionals) != 0 {
		t.Errorf("authority %v additional %v: want none", m.Authorities, m.Additionals)
	}
	if got := e.up.Calls(); !slices.Equal(got, []string{"ip4 example.com."}) {
		t.Errorf("upstream calls %q, want the lowercased rooted name once", got)
	}
	for _, a := range want {
		if got := e.names.Domains(a); !slices.Equal(got, []string{"example.com"}) {
			t.Errorf("Domains(%s) = %q, want [example.com]", a, got)
		}
	}
	if st := e.srv.Stats(); st != (Stats{Answered: 1}) {
		t.Errorf("Stats %+v, want Answered 1", st)
	}
}

func TestAnswerAAAA(t *testing.T) {
	e := newTestEnv(t, nil)
	m := e.answer(t, query(t, 7, "example.com.", dnsmessage.TypeAAAA))
	want := []netip.Addr{netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c")}
	if got := answerAddrs(m); m.RCode != dnsmessage.RCodeSuccess || !slices.Equal(got, want) {
		t.Fatalf("rcode %v answers %v, want NOERROR %v", m.RCode, got, want)
	}
	if _, ok := m.Answers[0].Body.(*dnsmessage.AAAAResource); !ok {
		t.Fatalf("answer %T, want AAAA", m.Answers[0].Body)
	}
	if got := e.up.Calls(); !slices.Equal(got, []string{"ip6 example.com."}) {
		t.Errorf("upstream calls %q", got)
	}
	if got := e.names.Domains(want[0]); !slices.Equal(got, []string{"example.com"}) {
		t.Errorf("Domains = %q", got)
	}
}

// Reserved addresses are answered as resolved: AllowConnection refuses them
// later. IPv4-mapped answers to an A query are sent as A records.
func TestAnswerKeepsAddresses(t *testing.T) {
	e := newTestEnv(t, nil)
	m := e.answer(t, query(t, 1, "private.example.com.", dnsmessage.TypeA))
	if got := answerAddrs(m); !slices.Equal(got, []netip.Addr{netip.MustParseAddr("10.0.0.5")}) {
		t.Errorf("private: answers %v, want [10.0.0.5]", got)
	}
	m = e.answer(t, query(t, 2, "mapped.example.com.", dnsmessage.TypeA))
	if got := answerAddrs(m); !slices.Equal(got, []netip.Addr{netip.MustParseAddr("198.51.100.9")}) {
		t.Errorf("mapped: answers %v, want [198.51.100.9]", got)
	}
	if got := e.names.Domains(netip.MustParseAddr("::ffff:198.51.100.9")); !slices.Equal(got, []string{"mapped.example.com"}) {
		t.Errorf("Domains(mapped) = %q", got)
	}
}

func TestPolicy(t *testing.T) {
	longPlain := strings.Repeat("a1", 21) // 42 letters and digits
	tests := []struct {
		name  string
		spec  *egress.Spec // nil: an empty Holder
		query string
		want  dnsmessage.RCode
	}{
		{"allowed domain without internet", &egress.Spec{Allow: egress.RuleSet{Domains: []string{"api.example.com"}}}, "api.example.com.", dnsmessage.RCodeSuccess},
		{"allowed domain, case folded", &egress.Spec{Allow: egress.RuleSet{Domains: []string{"api.example.com"}}}, "API.Example.COM.", dnsmessage.RCodeSuccess},
		{"other domain without internet", &egress.Spec{Allow: egress.RuleSet{Domains: []string{"api.example.com"}}}, "example.com.", dnsmessage.RCodeRefused},
		{"CIDR rule does not open names", &egress.Spec{Allow: egress.RuleSet{CIDRs: []string{"93.184.215.0/24"}}}, "example.com.", dnsmessage.RCodeRefused},
		{"wildcard allow", &egress.Spec{Allow: egress.RuleSet{Domains: []string{"*.example.com"}}}, "api.example.com.", dnsmessage.RCodeSuccess},
		{"wildcard allow excludes apex", &egress.Spec{Allow: egress.RuleSet{Domains: []string{"*.example.com"}}}, "example.com.", dnsmessage.RCodeRefused},
		{"deny list", &egress.Spec{AllowInternet: true, Deny: egress.RuleSet{Domains: []string{"evil.example.com"}}}, "evil.example.com.", dnsmessage.RCodeRefused},
		{"deny wins over allow", &egress.Spec{Allow: egress.RuleSet{Domains: []string{"*.example.com"}}, Deny: egress.RuleSet{Domains: []string{"evil.example.com"}}}, "evil.example.com.", dnsmessage.RCodeRefused},
		{"wildcard deny", &egress.Spec{AllowInternet: true, Deny: egress.RuleSet{Domains: []string{"*.evil.example.org"}}}, "sub.evil.example.org.", dnsmessage.RCodeRefused},
		{"no policy loaded", nil, "example.com.", dnsmessage.RCodeRefused},
		{"localhost", &egress.Spec{AllowInternet: true}, "localhost.", dnsmessage.RCodeRefused},
		{"metadata", &egress.Spec{AllowInternet: true}, "metadata.google.internal.", dnsmessage.RCodeRefused},
		{"root", &egress.Spec{AllowInternet: true}, ".", dnsmessage.RCodeRefused},
		{"numeric last label", &egress.Spec{AllowInternet: true}, "10.0.0.1.", dnsmessage.RCodeRefused},
		{"tunnel: long plain label", &egress.Spec{AllowInternet: true}, longPlain + ".example.com.", dnsmessage.RCodeRefused},
		{"tunnel: too many labels", &egress.Spec{AllowInternet: true}, "a.b.c.d.e.f.g.h.i.example.com.", dnsmessage.RCodeRefused},
		{"tunnel: hex label", &egress.Spec{AllowInternet: true}, "6578666c747261746564206279206120636f7665727420.example.com.", dnsmessage.RCodeRefused},
		{"bad characters", &egress.Spec{AllowInternet: true}, "ex ample.com.", dnsmessage.RCodeRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			if tt.spec == nil {
				e.pol.Store(nil)
			} else {
				e.pol.Store(mustPolicy(t, *tt.spec))
			}
			m := e.answer(t, query(t, 9, tt.query, dnsmessage.TypeA))
			if m.RCode != tt.want {
				t.Fatalf("rcode %v, want %v", m.RCode, tt.want)
			}
			if len(m.Questions) != 1 || m.ID != 9 {
				t.Errorf("ID %d questions %v: want ID 9 and the question echoed", m.ID, m.Questions)
			}
			if tt.want == dnsmessage.RCodeRefused {
				if calls := e.up.Calls(); len(calls) != 0 {
					t.Errorf("refused query reached the upstream: %q", calls)
				}
				if len(m.Answers) != 0 {
					t.Errorf("refused query has answers %v", m.Answers)
				}
				if st := e.srv.Stats(); st.Refused != 1 {
					t.Errorf("Stats %+v, want Refused 1", st)
				}
			} else if len(m.Answers) == 0 {
				t.Error("allowed query has no answers")
			}
		})
	}
}

func TestPolicyLoggedWithReason(t *testing.T) {
	e := newTestEnv(t, nil)
	e.pol.Store(mustPolicy(t, egress.Spec{AllowInternet: true, Deny: egress.RuleSet{Domains: []string{"evil.example.com"}}}))
	e.answer(t, query(t, 1, "evil.example.com.", dnsmessage.TypeA))
	if got := e.logs.String(); !strings.Contains(got, "deny.domains evil.example.com") || !strings.Contains(got, "level=DEBUG") {
		t.Errorf("log %q: want a debug line with the policy reason", got)
	}
}

func TestPolicySwappedLive(t *testing.T) {
	e := newTestEnv(t, nil)
	if m := e.answer(t, query(t, 1, "example.com.", dnsmessage.TypeA)); m.RCode != dnsmessage.RCodeSuccess {
		t.Fatalf("before the update: rcode %v", m.RCode)
	}
	e.pol.Store(mustPolicy(t, egress.Spec{Allow: egress.RuleSet{Domains: []string{"api.example.com"}}}))
	if m := e.answer(t, query(t, 2, "example.com.", dnsmessage.TypeA)); m.RCode != dnsmessage.RCodeRefused {
		t.Fatalf("after the update: rcode %v, want REFUSED", m.RCode)
	}
}

func TestOtherTypes(t *testing.T) {
	types := []dnsmessage.Type{
		dnsmessage.TypeTXT, dnsmessage.TypeMX, dnsmessage.TypeCNAME, dnsmessage.TypeSRV,
		dnsmessage.TypePTR, dnsmessage.TypeNS, dnsmessage.TypeSOA, dnsmessage.TypeALL,
		dnsmessage.TypeOPT, dnsmessage.TypeSVCB, dnsmessage.TypeHTTPS,
		10,    // NULL
		252,   // AXFR
		65000, // private use
	}
	for _, typ := range types {
		t.Run(typ.String(), func(t *testing.T) {
			e := newTestEnv(t, nil)
			m := e.answer(t, query(t, 5, "example.com.", typ))
			if m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 0 || len(m.Questions) != 1 || m.Questions[0].Type != typ {
				t.Fatalf("rcode %v answers %v questions %v: want NOERROR, no answers, the question echoed", m.RCode, m.Answers, m.Questions)
			}
			if calls := e.up.Calls(); len(calls) != 0 {
				t.Errorf("type %v reached the upstream: %q", typ, calls)
			}
			if st := e.srv.Stats(); st != (Stats{Unsupported: 1}) {
				t.Errorf("Stats %+v, want Unsupported 1", st)
			}
		})
	}
	t.Run("denied name", func(t *testing.T) {
		e := newTestEnv(t, nil)
		m := e.answer(t, query(t, 5, strings.Repeat("ab12", 11)+".example.com.", dnsmessage.TypeTXT))
		if m.RCode != dnsmessage.RCodeRefused {
			t.Fatalf("TXT for a tunnel-shaped name: rcode %v, want REFUSED", m.RCode)
		}
	})
}

func TestNegativeAnswers(t *testing.T) {
	tests := []struct {
		name  string
		typ   dnsmessage.Type
		want  dnsmessage.RCode
		calls []string
	}{
		{"missing.example.com.", dnsmessage.TypeA, dnsmessage.RCodeNameError, []string{"ip4 missing.example.com.", "ip6 missing.example.com."}},
		{"missing.example.com.", dnsmessage.TypeAAAA, dnsmessage.RCodeNameError, []string{"ip6 missing.example.com.", "ip4 missing.example.com."}},
		{"only4.example.com.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"ip6 only4.example.com.", "ip4 only4.example.com."}},
		{"only6.example.com.", dnsmessage.TypeA, dnsmessage.RCodeSuccess, []string{"ip4 only6.example.com.", "ip6 only6.example.com."}},
		// AAAA not found and the A lookup fails: no AAAA is all that is known.
		{"half.example.com.", dnsmessage.TypeAAAA, dnsmessage.RCodeSuccess, []string{"ip6 half.example.com.", "ip4 half.example.com."}},
	}
	for _, tt := range tests {
		t.Run(tt.name+tt.typ.String(), func(t *testing.T) {
			e := newTestEnv(t, nil)
			e.up.errs = map[string]error{"half.example.com": errBoom}
			e.up.errsFor = "ip4"
			m := e.answer(t, query(t, 3, tt.name, tt.typ))
			if m.RCode != tt.want || len(m.Answers) != 0 || len(m.Questions) != 1 {
				t.Fatalf("rcode %v answers %v: want %v with no answers and the question", m.RCode, m.Answers, tt.want)
			}
			if got := e.up.Calls(); !slices.Equal(got, tt.calls) {
				t.Errorf("upstream calls %q, want %q", got, tt.calls)
			}
			if st := e.srv.Stats(); st != (Stats{Answered: 1}) {
				t.Errorf("Stats %+v, want Answered 1", st)
			}
		})
	}
}

func TestUpstreamFailures(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"timeout", &net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}},
		{"servfail", &net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}},
		{"not a DNSError", errBoom},
		{"wrapped not-found is honoured", fmt.Errorf("wrapped: %w", &net.DNSError{IsNotFound: true})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			e.up.errs = map[string]error{"example.com": tt.err}
			m := e.answer(t, query(t, 4, "example.com.", dnsmessage.TypeA))
			want, st := dnsmessage.RCodeServerFailure, Stats{Failed: 1}
			if tt.name == "wrapped not-found is honoured" {
				want, st = dnsmessage.RCodeNameError, Stats{Answered: 1}
			}
			if m.RCode != want || m.ID != 4 || len(m.Questions) != 1 {
				t.Fatalf("rcode %v id %d: want %v, id 4, the question", m.RCode, m.ID, want)
			}
			if got := e.srv.Stats(); got != st {
				t.Errorf("Stats %+v, want %+v", got, st)
			}
			if e.names.Len() != 0 {
				t.Errorf("NameTable has %d entries after a failure", e.names.Len())
			}
		})
	}
}

// blockingUpstream waits for its context to end.
type blockingUpstream struct{}

func (blockingUpstream) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	<-ctx.Done()
	return nil, &net.DNSError{Err: ctx.Err().Error(), IsTimeout: true}
}

func TestUpstreamTimeout(t *testing.T) {
	e := newTestEnv(t, func(c *Config) {
		c.Upstream = blockingUpstream{}
		c.Timeout = 20 * time.Millisecond
	})
	done := make(chan dnsmessage.Message, 1)
	go func() { done <- e.answer(t, query(t, 8, "example.com.", dnsmessage.TypeA)) }()
	select {
	case m := <-done:
		if m.RCode != dnsmessage.RCodeServerFailure {
			t.Fatalf("rcode %v, want SERVFAIL", m.RCode)
		}
	case <-time.After(time.Minute): // deadlock guard only
		t.Fatal("Answer did not return after the upstream timeout")
	}
}

func TestMalformed(t *testing.T) {
	valid := query(t, 0x1234, "example.com.", dnsmessage.TypeA)
	twoQuestions := func() []byte {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x1234})
		b.StartQuestions()
		for _, n := range []string{"example.com.", "api.example.com."} {
			b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(n), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		}
		m, _ := b.Finish()
		return m
	}()
	oversized := func() []byte {
		// A valid query padded with an additional record to 600 bytes.
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x1234})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("example.com."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		b.StartAdditionals()
		b.UnknownResource(dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName("."), Type: 65001, Class: dnsmessage.ClassINET},
			dnsmessage.UnknownResource{Type: 65001, Data: make([]byte, 560)})
		m, _ := b.Finish()
		return m
	}()
	if len(oversized) <= MaxMessageSize {
		t.Fatalf("oversized query is only %d bytes", len(oversized))
	}
	response := append([]byte(nil), valid...)
	response[2] |= 0x80
	noQuestion := append([]byte(nil), valid[:12]...)
	noQuestion[5] = 0
	truncated := valid[:len(valid)-3]
	badLabel := append(append([]byte(nil), valid[:12]...), 0x40, 'a', 0, 0, 1, 0, 1) // reserved label type
	// Four 63-byte labels: 255 bytes of text, longer than any DNS name.
	longName := append([]byte(nil), valid[:12]...)
	for range 4 {
		longName = append(longName, 63)
		longName = append(longName, strings.Repeat("a-b", 21)...)
	}
	longName = append(longName, 0, 0, 1, 0, 1)
	pointerLoop := append(append([]byte(nil), valid[:12]...), 0xc0, 12, 0, 1, 0, 1)

	tests := []struct {
		name  string
		msg   []byte
		nilOK bool
		rcode dnsmessage.RCode
		stats Stats
		q     bool // question echoed
	}{
		{"empty", nil, true, 0, Stats{Malformed: 1}, false},
		{"short header", valid[:11], true, 0, Stats{Malformed: 1}, false},
		{"response", response, true, 0, Stats{Malformed: 1}, false},
		{"no question", noQuestion, false, dnsmessage.RCodeFormatError, Stats{Malformed: 1}, false},
		{"header claims a question that is missing", valid[:12], false, dnsmessage.RCodeFormatError, Stats{Malformed: 1}, false},
		{"truncated question", truncated, false, dnsmessage.RCodeFormatError, Stats{Malformed: 1}, false},
		{"reserved label type", badLabel, false, dnsmessage.RCodeFormatError, Stats{Malformed: 1}, false},
		{"name too long", longName, false, dnsmessage.RCodeFormatError, Stats{Malformed: 1}, false},
		{"pointer loop", pointerLoop, false, dnsmessage.RCodeFormatError, Stats{Malformed: 1}, false},
		{"two questions", twoQuestions, false, dnsmessage.RCodeFormatError, Stats{Malformed: 1}, false},
		{"oversized", oversized, false, dnsmessage.RCodeFormatError, Stats{Malformed: 1}, true},
		{"opcode STATUS", queryWith(t, dnsmessage.Header{ID: 0x1234, OpCode: 2}, "example.com.", dnsmessage.TypeA, dnsmessage.ClassINET),
			false, dnsmessage.RCodeNotImplemented, Stats{Unsupported: 1}, true},
		{"opcode NOTIFY", queryWith(t, dnsmessage.Header{ID: 0x1234, OpCode: 4}, "example.com.", dnsmessage.TypeSOA, dnsmessage.ClassINET),
			false, dnsmessage.RCodeNotImplemented, Stats{Unsupported: 1}, true},
		{"class CHAOS", queryWith(t, dnsmessage.Header{ID: 0x1234}, "version.bind.", dnsmessage.TypeTXT, dnsmessage.ClassCHAOS),
			false, dnsmessage.RCodeRefused, Stats{Unsupported: 1}, true},
		{"class ANY", queryWith(t, dnsmessage.Header{ID: 0x1234}, "example.com.", dnsmessage.TypeA, dnsmessage.ClassANY),
			false, dnsmessage.RCodeRefused, Stats{Unsupported: 1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEnv(t, nil)
			r := e.srv.Answer(context.Background(), tt.msg)
			if tt.nilOK {
				if r != nil {
					t.Fatalf("got a %d-byte reply, want none", len(r))
				}
			} else {
				var m dnsmessage.Message
				if err := m.Unpack(r); err != nil {
					t.Fatalf("reply does not parse: %v", err)
				}
				if m.ID != 0x1234 || !m.Response || m.RCode != tt.rcode || len(m.Answers) != 0 {
					t.Fatalf("header %+v answers %d: want ID 0x1234, QR, %v, no answers", m.Header, len(m.Answers), tt.rcode)
				}
				if got := len(m.Questions) == 1; got != tt.q {
					t.Errorf("questions %v: want echoed=%v", m.Questions, tt.q)
				}
			}
			if got := e.srv.Stats(); got != tt.stats {
				t.Errorf("Stats %+v, want %+v", got, tt.stats)
			}
			if calls := e.up.Calls(); len(calls) != 0 {
				t.Errorf("upstream called: %q", calls)
			}
		})
	}
}

func TestEDNSIgnored(t *testing.T) {
	e := newTestEnv(t, nil)
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 21, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("example.com."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	b.StartAdditionals()
	var opt dnsmessage.ResourceHeader
	if err := opt.SetEDNS0(65535, dnsmessage.RCodeSuccess, true); err != nil {
		t.Fatal(err)
	}
	b.OPTResource(opt, dnsmessage.OPTResource{Options: []dnsmessage.Option{{Code: 10, Data: []byte("cookie00")}}})
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	m := e.answer(t, q)
	if m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 2 || len(m.Additionals) != 0 {
		t.Fatalf("rcode %v answers %d additionals %v: want NOERROR, 2 answers, no OPT echoed", m.RCode, len(m.Answers), m.Additionals)
	}
}

// manyAddrs returns n distinct addresses: IPv4 when v4, else IPv6.
func manyAddrs(n int, v4 bool) []netip.Addr {
	var out []netip.Addr
	for i := range n {
		if v4 {
			out = append(out, netip.AddrFrom4([4]byte{198, 51, 100, byte(i + 1)}))
		} else {
			out = append(out, netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 1)}))
		}
	}
	return out
}

func TestAnswerBounds(t *testing.T) {
	// A name of 3 labels of 63 bytes plus "com": 196 bytes, allowed.
	label := "a-" + strings.Repeat("b", 61)
	long := label + "." + label + "." + label + ".com"
	tests := []struct {
		name      string
		typ       dnsmessage.Type
		addrs     []netip.Addr
		wantCount int
	}{
		{"many-a.example.com", dnsmessage.TypeA, manyAddrs(40, true), MaxAnswers},
		{"many-aaaa.example.com", dnsmessage.TypeAAAA, manyAddrs(40, false), MaxAnswers},
		{"dup.example.com", dnsmessage.TypeA, append(manyAddrs(3, true), manyAddrs(3, true)...), 3},
		// 12+197+4 = 213 bytes of header and question; 28 per AAAA record: 10 fit.
		{long, dnsmessage.TypeAAAA, manyAddrs(16, false), 10},
		// 16 per A record: 18 would fit; the cap stays 16.
		{long, dnsmessage.TypeA, manyAddrs(16, true), 16},
	}
	for _, tt := range tests {
		t.Run(tt.name[:min(len(tt.name), 20)]+tt.typ.String(), func(t *testing.T) {
			e := newTestEnv(t, nil)
			e.up.records = map[string][]netip.Addr{tt.name: tt.addrs}
			m := e.answer(t, query(t, 11, tt.name+".", tt.typ))
			got := answerAddrs(m)
			if m.RCode != dnsmessage.RCodeSuccess || len(got) != tt.wantCount {
				t.Fatalf("rcode %v, %d answers; want NOERROR and %d", m.RCode, len(got), tt.wantCount)
			}
			if m.Truncated {
				t.Error("TC set")
			}
			if !slices.Equal(got, tt.addrs[:tt.wantCount]) {
				t.Errorf("answers %v, want the first %d resolved", got, tt.wantCount)
			}
			// Only what was answered is recorded.
			for _, a := range tt.addrs {
				recorded := len(e.names.Domains(a)) == 1
				if want := slices.Contains(got, a); recorded != want {
					t.Errorf("address %s recorded=%v, want %v", a, recorded, want)
				}
			}
		})
	}
}

func TestRateLimit(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.QueriesPerSecond = 1; c.Burst = 2 })
	for i := range 2 {
		if m := e.answer(t, query(t, uint16(i), "example.com.", dnsmessage.TypeA)); m.RCode != dnsmessage.RCodeSuccess {
			t.Fatalf("query %d within the burst: rcode %v", i, m.RCode)
		}
	}
	m := e.answer(t, query(t, 99, "api.example.com.", dnsmessage.TypeA))
	if m.RCode != dnsmessage.RCodeRefused || m.ID != 99 || len(m.Questions) != 1 {
		t.Fatalf("query over the rate: rcode %v id %d questions %v; want REFUSED, id 99, the question", m.RCode, m.ID, m.Questions)
	}
	// Unparsable and unsupported queries take tokens too.
	if m := e.answer(t, query(t, 100, "example.com.", dnsmessage.TypeTXT)); m.RCode != dnsmessage.RCodeRefused {
		t.Fatalf("TXT over the rate: rcode %v, want REFUSED", m.RCode)
	}
	if calls := e.up.Calls(); len(calls) != 2 {
		t.Errorf("upstream calls %q: rate-limited queries must not reach it", calls)
	}
	if st := e.srv.Stats(); st != (Stats{Answered: 2, RateLimited: 2}) {
		t.Errorf("Stats %+v, want Answered 2 RateLimited 2", st)
	}
	e.clk.advance(time.Second)
	if m := e.answer(t, query(t, 101, "api.example.com.", dnsmessage.TypeA)); m.RCode != dnsmessage.RCodeSuccess {
		t.Fatalf("after a second: rcode %v, want NOERROR", m.RCode)
	}
}

func TestTTL(t *testing.T) {
	tests := []struct {
		ttl, nameTTL time.Duration
		wantTTL      uint32
		wantNameTTL  time.Duration
	}{
		{0, 0, 60, 120 * time.Second},
		{10 * time.Second, 0, 10, 20 * time.Second},
		{1500 * time.Millisecond, 0, 1, 2 * time.Second},
		{time.Millisecond, 0, 1, 2 * time.Second},
		{time.Hour, 0, 300, 10 * time.Minute},
		{10 * time.Second, 5 * time.Second, 10, 20 * time.Second}, // NameTTL never below 2*TTL
		{10 * time.Second, time.Minute, 10, time.Minute},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.ttl, "/", tt.nameTTL), func(t *testing.T) {
			e := newTestEnv(t, func(c *Config) { c.TTL = tt.ttl; c.NameTTL = tt.nameTTL })
			m := e.answer(t, query(t, 1, "api.example.com.", dnsmessage.TypeA))
			if len(m.Answers) != 1 || m.Answers[0].Header.TTL != tt.wantTTL {
				t.Fatalf("answers %v: want one with TTL %d", m.Answers, tt.wantTTL)
			}
			a := netip.MustParseAddr("198.51.100.7")
			e.clk.advance(tt.wantNameTTL - time.Millisecond)
			if got := e.names.Domains(a); len(got) != 1 {
				t.Fatalf("just before NameTTL: Domains = %q, want the name", got)
			}
			e.clk.advance(time.Millisecond)
			if got := e.names.Domains(a); got != nil {
				t.Fatalf("at NameTTL: Domains = %q, want nil", got)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	ok := Config{Policy: &egress.Holder{}, Upstream: &fakeUpstream{}, Names: NewNameTable(0, nil)}
	if _, err := New(ok); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	bad := []func(*Config){
		func(c *Config) { c.Policy = nil },
		func(c *Config) { c.Upstream = nil },
		func(c *Config) { c.Names = nil },
		func(c *Config) { c.QueriesPerSecond = -1 },
		func(c *Config) { c.QueriesPerSecond = math.Inf(1) },
		func(c *Config) { c.QueriesPerSecond = math.NaN() },
		func(c *Config) { c.Burst = -1 },
		func(c *Config) { c.TTL = -time.Second },
		func(c *Config) { c.NameTTL = -time.Second },
		func(c *Config) { c.Timeout = -time.Second },
	}
	for i, mod := range bad {
		c := ok
		mod(&c)
		if _, err := New(c); !errdefs.IsInvalidArgument(err) {
			t.Errorf("bad config %d: error %v, want InvalidArgument", i, err)
		}
	}
}

// TestAnswerConcurrent runs Answer from many goroutines; run with -race.
func TestAnswerConcurrent(t *testing.T) {
	e := newTestEnv(t, func(c *Config) { c.Now = nil; c.QueriesPerSecond = 1e9; c.Burst = 1 << 20 })
	names := []string{"example.com.", "api.example.com.", "missing.example.com.", "evil.example.com."}
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				r := e.srv.Answer(context.Background(), query(t, uint16(i), names[(g+i)%len(names)], dnsmessage.TypeA))
				if r == nil {
					t.Error("nil reply")
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	st := e.srv.Stats()
	if st.Answered != 8*200 {
		t.Errorf("Stats %+v, want Answered %d", st, 8*200)
	}
}

// TestTotals: Servers sharing a Totals count into it together, by decision,
// each keeping its own Stats: the node's rate-limit refusals are a metric,
// not only a sandbox's stats.
func TestTotals(t *testing.T) {
	var tot Totals
	a := newTestEnv(t, func(c *Config) { c.QueriesPerSecond = 1; c.Burst = 1; c.Totals = &tot })
	b := newTestEnv(t, func(c *Config) { c.Totals = &tot })
	for i := range 3 {
		a.answer(t, query(t, uint16(i), "example.com.", dnsmessage.TypeA))
	}
	b.answer(t, query(t, 7, "example.com.", dnsmessage.TypeA))
	want := map[string]uint64{DecisionAnswered: 2, DecisionRateLimited: 2, DecisionRefused: 0, DecisionFailed: 0, DecisionMalformed: 0, DecisionUnsupported: 0}
	if got := tot.Snapshot(); !maps.Equal(got, want) {
		t.Errorf("totals %v, want %v", got, want)
	}
	if st := a.srv.Stats(); st != (Stats{Answered: 1, RateLimited: 2}) {
		t.Errorf("rate-limited server's Stats %+v, want Answered 1 RateLimited 2", st)
	}
}
