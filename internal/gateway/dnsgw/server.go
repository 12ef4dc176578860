package dnsgw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Defaults and bounds of a Server.
const (
	// DefaultQueriesPerSecond and DefaultBurst are the query rate of a
	// sandbox when Config leaves them zero.
	DefaultQueriesPerSecond = 50
	DefaultBurst            = 100
	// DefaultTTL is the TTL of answers when Config.TTL is zero; MaxTTL caps
	// Config.TTL. A short TTL keeps the NameTable close to what clients
	// hold in their caches.
	DefaultTTL = 60 * time.Second
	MaxTTL     = 5 * time.Minute
	// DefaultTimeout bounds one upstream lookup when Config.Timeout is zero.
	DefaultTimeout = 3 * time.Second
	// MaxMessageSize is the largest query accepted and the largest reply
	// sent: the classic UDP DNS limit (RFC 1035 section 4.2.1).
	MaxMessageSize = 512
	// MaxAnswers is the most address records in one reply.
	MaxAnswers = 16

	logPerSecond = 1
	logBurst     = 20
)

// Upstream resolves names for the Server. *net.Resolver satisfies it; the
// gateway passes one whose Dial reaches the configured upstream DNS server.
// network is "ip4" or "ip6" and host a rooted name ("example.com."). An
// error that is a *net.DNSError with IsNotFound means the name has no
// address of that family (or does not exist at all).
type Upstream interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Server. Policy, Upstream and Names are required;
// zero values of the others select the defaults.
type Config struct {
	// Policy holds the sandbox's current egress policy; every query name is
	// decided by Policy.Load().AllowQuery at the time of the query.
	Policy *egress.Holder
	// Upstream resolves allowed A and AAAA queries.
	Upstream Upstream
	// Names records every answered address with its query name.
	Names *NameTable
	// QueriesPerSecond and Burst are the token bucket over all queries of
	// this Server (this sandbox). Defaults: DefaultQueriesPerSecond,
	// DefaultBurst.
	QueriesPerSecond float64
	Burst            int
	// TTL is the TTL of every answer record, rounded down to whole seconds
	// and at least one second. Default DefaultTTL, capped at MaxTTL.
	TTL time.Duration
	// NameTTL is how long an answered address stays in Names. Default (and
	// lower bound) TTL plus one TTL of grace: a client that caches an
	// answer for its full TTL and connects at the end of it must still be
	// known to have asked for the name.
	NameTTL time.Duration
	// Timeout bounds each upstream lookup. Default DefaultTimeout.
	Timeout time.Duration
	// Log receives refused and failed queries at debug level, at a bounded
	// rate. Default: discard.
	Log *slog.Logger
	// Now is the clock of the rate limits. Default time.Now.
	Now func() time.Time
	// Totals, when set, also counts every decision (shared by the Servers
	// of a node). Nil: only Stats counts.
	Totals *Totals
}

// Server answers the DNS queries of one sandbox; see the package doc for
// the rules. A Server is safe for concurrent use.
type Server struct {
	policy  *egress.Holder
	up      Upstream
	names   *NameTable
	ttl     uint32 // seconds
	nameTTL time.Duration
	timeout time.Duration
	log     *slog.Logger
	rate    *tokenBucket
	logRate *tokenBucket

	counts [numDecisions]atomic.Uint64
	// totals, when set, counts the decisions of every Server of a node.
	totals *Totals
}

// Decisions of a query, as counted (Stats) and exposed by the node
// (space_gateway_dns_queries_total{decision}).
const (
	DecisionAnswered    = "answered"
	DecisionRefused     = "refused"
	DecisionRateLimited = "rate_limited"
	DecisionFailed      = "failed"
	DecisionMalformed   = "malformed"
	DecisionUnsupported = "unsupported"
)

// Decisions lists every decision, in the order of Stats' fields.
var Decisions = []string{DecisionAnswered, DecisionRefused, DecisionRateLimited, DecisionFailed, DecisionMalformed, DecisionUnsupported}

type decision int

const (
	answered decision = iota
	refused
	rateLimited
	failed
	malformed
	unsupported
	numDecisions
)

// Totals counts the decisions of several Servers together: a node's, all
// its sandboxes' (a per-sandbox label would be unbounded). The zero value
// is ready; share one through Config.Totals.
type Totals struct {
	counts [numDecisions]atomic.Uint64
}

// Snapshot returns the totals by decision (Decisions).
func (t *Totals) Snapshot() map[string]uint64 {
	m := make(map[string]uint64, len(Decisions))
	for i, d := range Decisions {
		m[d] = t.counts[i].Load()
	}
	return m
}

// count counts one query's decision d, in this Server and its totals.
func (s *Server) count(d decision) {
	s.counts[d].Add(1)
	if s.totals != nil {
		s.totals.counts[d].Add(1)
	}
}

// Stats counts the decisions of a Server since New.
type Stats struct {
	// Answered counts A and AAAA queries answered from the upstream:
	// addresses, no addresses of the type, or NXDOMAIN.
	Answered uint64
	// Refused counts queries for names the policy denied (REFUSED).
	Refused uint64
	// RateLimited counts queries over the rate (REFUSED).
	RateLimited uint64
	// Failed counts upstream errors and timeouts (SERVFAIL).
	Failed uint64
	// Malformed counts messages dropped (responses, shorter than a header)
	// or answered FORMERR (unparsable, oversized, not one question).
	Malformed uint64
	// Unsupported counts other opcodes (NOTIMP), other classes (REFUSED)
	// and types other than A and AAAA (empty NOERROR).
	Unsupported uint64
}

// New validates cfg and returns a Server. Errors are of class
// errdefs.ErrInvalidArgument.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Policy == nil:
		return nil, fmt.Errorf("dnsgw: config: Policy is nil: %w", errdefs.ErrInvalidArgument)
	case cfg.Upstream == nil:
		return nil, fmt.Errorf("dnsgw: config: Upstream is nil: %w", errdefs.ErrInvalidArgument)
	case cfg.Names == nil:
		return nil, fmt.Errorf("dnsgw: config: Names is nil: %w", errdefs.ErrInvalidArgument)
	case cfg.QueriesPerSecond < 0 || math.IsNaN(cfg.QueriesPerSecond) || math.IsInf(cfg.QueriesPerSecond, 0):
		return nil, fmt.Errorf("dnsgw: config: QueriesPerSecond %v: want a finite rate >= 0: %w", cfg.QueriesPerSecond, errdefs.ErrInvalidArgument)
	case cfg.Burst < 0:
		return nil, fmt.Errorf("dnsgw: config: Burst %d is negative: %w", cfg.Burst, errdefs.ErrInvalidArgument)
	case cfg.TTL < 0, cfg.NameTTL < 0, cfg.Timeout < 0:
		return nil, fmt.Errorf("dnsgw: config: TTL %v, NameTTL %v, Timeout %v: durations may not be negative: %w",
			cfg.TTL, cfg.NameTTL, cfg.Timeout, errdefs.ErrInvalidArgument)
	}
	qps, burst := cfg.QueriesPerSecond, cfg.Burst
	if qps == 0 {
		qps = DefaultQueriesPerSecond
	}
	if burst == 0 {
		burst = DefaultBurst
	}
	ttl := cfg.TTL
	switch {
	case ttl == 0:
		ttl = DefaultTTL
	case ttl > MaxTTL:
		ttl = MaxTTL
	case ttl < time.Second:
		ttl = time.Second
	}
	ttl = ttl.Truncate(time.Second)
	nameTTL := max(cfg.NameTTL, 2*ttl)
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Server{
		policy:  cfg.Policy,
		up:      cfg.Upstream,
		names:   cfg.Names,
		ttl:     uint32(ttl / time.Second),
		nameTTL: nameTTL,
		timeout: timeout,
		log:     log,
		rate:    newTokenBucket(qps, burst, now),
		logRate: newTokenBucket(logPerSecond, logBurst, now),
		totals:  cfg.Totals,
	}, nil
}

// Stats returns the decision counters.
func (s *Server) Stats() Stats {
	return Stats{
		Answered:    s.counts[answered].Load(),
		Refused:     s.counts[refused].Load(),
		RateLimited: s.counts[rateLimited].Load(),
		Failed:      s.counts[failed].Load(),
		Malformed:   s.counts[malformed].Load(),
		Unsupported: s.counts[unsupported].Load(),
	}
}

// Answer answers one DNS message received over UDP and returns the reply
// to send. It returns nil, and nothing should be sent, when query is a
// response or too short to hold a header; every other reply has the
// query's ID, echoes its question when there is exactly one, and is at
// most MaxMessageSize bytes. ctx bounds the upstream lookup.
func (s *Server) Answer(ctx context.Context, query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		s.count(malformed)
		return nil
	}
	q, qerr := oneQuestion(&p)
	if !s.rate.allow() {
		s.count(rateLimited)
		return s.reply(h, q, dnsmessage.RCodeRefused)
	}
	switch {
	case len(query) > MaxMessageSize:
		s.count(malformed)
		return s.reply(h, q, dnsmessage.RCodeFormatError)
	case h.OpCode != 0:
		s.count(unsupported)
		return s.reply(h, q, dnsmessage.RCodeNotImplemented)
	case qerr != nil:
		s.count(malformed)
		return s.reply(h, nil, dnsmessage.RCodeFormatError)
	case q.Class != dnsmessage.ClassINET:
		s.count(unsupported)
		return s.reply(h, q, dnsmessage.RCodeRefused)
	}
	if d := s.policy.Load().AllowQuery(q.Name.String()); !d.Allow {
		s.count(refused)
		s.logAt(ctx, slog.LevelDebug, "dns query refused by policy", "name", q.Name.String(), "type", q.Type, "reason", d.Reason)
		return s.reply(h, q, dnsmessage.RCodeRefused)
	}
	switch q.Type {
	case dnsmessage.TypeA:
		return s.resolve(ctx, h, q, "ip4")
	case dnsmessage.TypeAAAA:
		return s.resolve(ctx, h, q, "ip6")
	default:
		// Tunnel carriers (TXT, NULL, MX, ANY...): "no records of this
		// type", never asked upstream. See the package doc.
		s.count(unsupported)
		return s.reply(h, q, dnsmessage.RCodeSuccess)
	}
}

// oneQuestion returns the only question of the message, or an error when
// it has none, several, or one that does not parse.
func oneQuestion(p *dnsmessage.Parser) (*dnsmessage.Question, error) {
	q, err := p.Question()
	if err != nil {
		return nil, fmt.Errorf("question: %w", err)
	}
	if _, err := p.Question(); !errors.Is(err, dnsmessage.ErrSectionDone) {
		return nil, errors.New("more than one question")
	}
	return &q, nil
}

// resolve answers an allowed A ("ip4") or AAAA ("ip6") query from the
// upstream and records the answered addresses in s.names.
func (s *Server) resolve(ctx context.Context, h dnsmessage.Header, q *dnsmessage.Question, family string) []byte {
	// The upstream gets the name lowercased: the case the client chose
	// (RFC 5452 "0x20") is echoed in the reply but does not leave.
	name := normalizeDomain(q.Name.String())
	fqdn := name + "."
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	addrs, err := s.up.LookupNetIP(ctx, family, fqdn)
	if err != nil {
		if !isNotFound(err) {
			s.count(failed)
			s.logAt(ctx, slog.LevelDebug, "dns upstream lookup failed", "name", name, "network", family, "err", err)
			return s.reply(h, q, dnsmessage.RCodeServerFailure)
		}
		s.count(answered)
		return s.reply(h, q, s.negative(ctx, family, fqdn))
	}
	addrs = pickFamily(addrs, family, MaxAnswers)
	msg, n := buildReply(h, q, dnsmessage.RCodeSuccess, s.ttl, addrs)
	if n > 0 {
		s.names.Record(name, addrs[:n], s.nameTTL)
	}
	s.count(answered)
	return msg
}

// negative decides the reply to a query the upstream found no address of
// family for: NXDOMAIN only when the other family is not found either,
// since net.Resolver does not tell a missing name from a missing type.
// When the second lookup fails otherwise, the true part of what is known
// is answered: no records of this type.
func (s *Server) negative(ctx context.Context, family, fqdn string) dnsmessage.RCode {
	other := "ip6"
	if family == "ip6" {
		other = "ip4"
	}
	if _, err := s.up.LookupNetIP(ctx, other, fqdn); err != nil && isNotFound(err) {
		return dnsmessage.RCodeNameError
	}
	return dnsmessage.RCodeSuccess
}

func isNotFound(err error) bool {
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr) && dnsErr.IsNotFound
}

// pickFamily returns up to limit distinct addresses of family from addrs,
// without zones, IPv4 unmapped for "ip4".
func pickFamily(addrs []netip.Addr, family string, limit int) []netip.Addr {
	out := make([]netip.Addr, 0, min(len(addrs), limit))
	for _, a := range addrs {
		if len(out) == limit {
			break
		}
		a = a.WithZone("")
		switch {
		case family == "ip4" && a.Unmap().Is4():
			a = a.Unmap()
		case family == "ip6" && a.Is6():
		default:
			continue
		}
		if !containsAddr(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, b := range as {
		if a == b {
			return true
		}
	}
	return false
}

// reply builds a reply without answer records.
func (s *Server) reply(h dnsmessage.Header, q *dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	msg, _ := buildReply(h, q, rcode, 0, nil)
	return msg
}

// logAt logs at level when the logger wants it and the log rate allows.
func (s *Server) logAt(ctx context.Context, level slog.Level, msg string, args ...any) {
	if !s.log.Enabled(ctx, level) || !s.logRate.allow() {
		return
	}
	s.log.Log(ctx, level, msg, args...)
}
