package credentials

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// fakeClock is a settable clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func cred(id string, scope Scope, hosts ...string) Credential {
	return Credential{
		ID: id, Scope: scope, Name: "label " + id,
		Secret:       []byte("s3cret-" + id),
		Injection:    Injection{Method: MethodHeader, Name: "Authorization"},
		AllowedHosts: hosts,
	}
}

func newTestManager(t *testing.T, creds ...Credential) (*Manager, *MemoryBackend, *MemoryAuditLog, *fakeClock) {
	t.Helper()
	b := &MemoryBackend{}
	for _, c := range creds {
		if err := b.Put(context.Background(), c); err != nil {
			t.Fatalf("Put(%s): %v", c.ID, err)
		}
	}
	a := &MemoryAuditLog{}
	clk := &fakeClock{t: t0}
	return NewManager(b, a, WithClock(clk.Now)), b, a, clk
}

func TestResolveScopePrecedence(t *testing.T) {
	const host = "api.example.com"
	tenant := cred("c-tenant", Scope{Tenant: "t1"}, host)
	project := cred("c-project", Scope{Tenant: "t1", Project: "p1"}, host)
	sandbox := cred("c-sandbox", Scope{Tenant: "t1", Sandbox: "sb1"}, host)
	both := cred("c-both", Scope{Tenant: "t1", Project: "p1", Sandbox: "sb1"}, host)
	other := cred("c-other", Scope{Tenant: "t2"}, host)
	m, _, _, _ := newTestManager(t, tenant, project, sandbox, both, other)

	tests := []struct {
		req  Request
		want string
	}{
		{Request{Tenant: "t1", Project: "p1", Sandbox: "sb1", Host: host}, "c-both"},
		{Request{Tenant: "t1", Project: "p2", Sandbox: "sb1", Host: host}, "c-sandbox"},
		{Request{Tenant: "t1", Project: "p1", Sandbox: "sb2", Host: host}, "c-project"},
		{Request{Tenant: "t1", Sandbox: "sb9", Host: host}, "c-tenant"},
		{Request{Tenant: "t2", Project: "p1", Sandbox: "sb1", Host: host}, "c-other"},
	}
	for _, tt := range tests {
		got, err := m.Resolve(context.Background(), tt.req)
		if err != nil {
			t.Fatalf("Resolve(%+v): %v", tt.req, err)
		}
		if got.ID != tt.want || string(got.Secret) != "s3cret-"+tt.want {
			t.Errorf("Resolve(%+v) = %s, want %s", tt.req, got.ID, tt.want)
		}
	}
	if _, err := m.Resolve(context.Background(), Request{Tenant: "t3", Sandbox: "sb1", Host: host}); !errdefs.IsNotFound(err) {
		t.Errorf("tenant without credentials: err = %v, want ErrNotFound", err)
	}
}

func TestResolveHostSpecificity(t *testing.T) {
	// Same scope: the exact host beats the wildcard, whatever the ids.
	wide := cred("a-wide", Scope{Tenant: "t1"}, "*.example.com")
	exact := cred("z-exact", Scope{Tenant: "t1"}, "api.example.com")
	// A more specific scope with a wildcard beats a tenant exact match.
	sb := cred("m-sb", Scope{Tenant: "t1", Sandbox: "sb1"}, "*.example.com")
	m, _, _, _ := newTestManager(t, wide, exact, sb)
	check := func(req Request, want string) {
		t.Helper()
		got, err := m.Resolve(context.Background(), req)
		if err != nil || got.ID != want {
			t.Errorf("Resolve(%+v) = %v, %v; want %s", req, got, err, want)
		}
	}
	check(Request{Tenant: "t1", Sandbox: "sb2", Host: "API.Example.com."}, "z-exact")
	check(Request{Tenant: "t1", Sandbox: "sb2", Host: "other.example.com"}, "a-wide")
	check(Request{Tenant: "t1", Sandbox: "sb1", Host: "api.example.com"}, "m-sb")

	_, err := m.Resolve(context.Background(), Request{Tenant: "t1", Sandbox: "sb1", Host: "example.org"})
	if !errdefs.IsPermissionDenied(err) {
		t.Errorf("host without a credential: err = %v, want ErrPermissionDenied", err)
	}
	_, err = m.Resolve(context.Background(), Request{Tenant: "t1", Sandbox: "sb1", Host: "example.com"})
	if !errdefs.IsPermissionDenied(err) {
		t.Errorf("apex of a wildcard: err = %v, want ErrPermissionDenied", err)
	}
}

func TestResolveExpiry(t *testing.T) {
	tenant := cred("c-tenant", Scope{Tenant: "t1"}, "a.example.com")
	tenant.ExpiresAt = t0.Add(2 * time.Hour)
	sb := cred("c-sb", Scope{Tenant: "t1", Sandbox: "sb1"}, "a.example.com")
	sb.ExpiresAt = t0.Add(time.Hour)
	m, _, audit, clk := newTestManager(t, tenant, sb)
	req := Request{Tenant: "t1", Sandbox: "sb1", ExecutionID: "ex-1", Host: "a.example.com"}

	if got, err := m.Resolve(context.Background(), req); err != nil || got.ID != "c-sb" {
		t.Fatalf("before expiry: %v, %v; want c-sb", got, err)
	}
	clk.Advance(time.Hour) // sb expires exactly now
	if got, err := m.Resolve(context.Background(), req); err != nil || got.ID != "c-tenant" {
		t.Fatalf("sandbox credential expired: %v, %v; want the tenant one", got, err)
	}
	clk.Advance(time.Hour)
	_, err := m.Resolve(context.Background(), req)
	if !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("all expired: err = %v, want ErrFailedPrecondition", err)
	}
	last := audit.Entries()[2]
	if last.Allowed || last.Reason != ReasonExpired || !last.Time.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("audit of the expired attempt = %+v", last)
	}
}

func TestResolveRateLimit(t *testing.T) {
	c := cred("c1", Scope{Tenant: "t1"}, "a.example.com")
	c.RateLimit = 3
	unlimited := cred("c2", Scope{Tenant: "t1"}, "b.example.com")
	m, _, audit, clk := newTestManager(t, c, unlimited)
	req := Request{Tenant: "t1", Sandbox: "sb1", Host: "a.example.com"}
	for i := range 3 {
		if _, err := m.Resolve(context.Background(), req); err != nil {
			t.Fatalf("use %d of a burst of 3: %v", i+1, err)
		}
	}
	_, err := m.Resolve(context.Background(), req)
	if !errdefs.IsResourceExhausted(err) {
		t.Fatalf("4th use within the minute: err = %v, want ErrResourceExhausted", err)
	}
	if e := audit.Entries()[3]; e.Allowed || e.CredentialID != "c1" || e.Reason != ReasonRateLimited {
		t.Errorf("audit of the limited attempt = %+v", e)
	}
	clk.Advance(20 * time.Second) // one token (3 per minute)
	if _, err := m.Resolve(context.Background(), req); err != nil {
		t.Fatalf("after 20s: %v, want one token", err)
	}
	if _, err := m.Resolve(context.Background(), req); !errdefs.IsResourceExhausted(err) {
		t.Fatalf("second use after 20s: err = %v, want ErrResourceExhausted", err)
	}
	for range 100 {
		if _, err := m.Resolve(context.Background(), Request{Tenant: "t1", Host: "b.example.com"}); err != nil {
			t.Fatalf("unlimited credential: %v", err)
		}
	}
}

func TestResolveInvalidRequest(t *testing.T) {
	m, _, audit, _ := newTestManager(t, cred("c1", Scope{Tenant: "t1"}, "a.example.com"))
	for _, req := range []Request{
		{Tenant: "", Host: "a.example.com"},
		{Tenant: "t1", Host: "a.example.com:443"},
		{Tenant: "t1", Sandbox: "../x", Host: "a.example.com"},
		{Tenant: "t1", ExecutionID: "ex 1", Host: "a.example.com"},
		{Tenant: "t1", Host: strings.Repeat("a", 10000)},
	} {
		if _, err := m.Resolve(context.Background(), req); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Resolve(%.80v): err = %v, want ErrInvalidArgument", req, err)
		}
	}
	for _, e := range audit.Entries() {
		if e.Allowed || e.Reason != ReasonInvalid || len(e.Host) > 256 {
			t.Errorf("audit entry %+v: want a bounded denial for an invalid request", e)
		}
	}
}

func TestResolveAudit(t *testing.T) {
	m, _, audit, _ := newTestManager(t, cred("c1", Scope{Tenant: "t1", Project: "p1"}, "a.example.com"))
	req := Request{Tenant: "t1", Project: "p1", Sandbox: "sb1", ExecutionID: "ex-7", Host: "A.example.com."}
	if _, err := m.Resolve(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	req.Host = "b.example.com"
	if _, err := m.Resolve(context.Background(), req); err == nil {
		t.Fatal("Resolve for a host without a rule succeeded")
	}
	want := []AuditEntry{
		{Time: t0, Tenant: "t1", Project: "p1", Sandbox: "sb1", ExecutionID: "ex-7", Host: "a.example.com", CredentialID: "c1", Allowed: true, Reason: ReasonResolved},
		{Time: t0, Tenant: "t1", Project: "p1", Sandbox: "sb1", ExecutionID: "ex-7", Host: "b.example.com", Reason: ReasonHostMismatch},
	}
	got := audit.Entries()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audit entries\n got %+v\nwant %+v", got, want)
	}
}

// failingAudit fails every Record.
type failingAudit struct{}

func (failingAudit) Record(context.Context, AuditEntry) error { return errors.New("disk full") }

func TestResolveFailsClosedWithoutAudit(t *testing.T) {
	b := &MemoryBackend{}
	if err := b.Put(context.Background(), cred("c1", Scope{Tenant: "t1"}, "a.example.com")); err != nil {
		t.Fatal(err)
	}
	m := NewManager(b, failingAudit{})
	got, err := m.Resolve(context.Background(), Request{Tenant: "t1", Host: "a.example.com"})
	if got != nil || !errdefs.IsUnavailable(err) {
		t.Errorf("Resolve with a failing audit log = %v, %v; want nil, ErrUnavailable", got, err)
	}
}

func TestResolveConcurrent(t *testing.T) {
	c := cred("c1", Scope{Tenant: "t1"}, "*.example.com")
	c.RateLimit = 50
	m, b, audit, clk := newTestManager(t, c)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				got, err := m.Resolve(context.Background(), Request{Tenant: "t1", Sandbox: fmt.Sprintf("sb%d", g), Host: fmt.Sprintf("h%d.example.com", i)})
				if err == nil {
					mu.Lock()
					allowed++
					mu.Unlock()
					got.Zero()
				} else if !errdefs.IsResourceExhausted(err) {
					t.Errorf("Resolve: %v", err)
				}
				if i == 10 {
					clk.Advance(time.Millisecond)
					if err := b.Put(context.Background(), c); err != nil {
						t.Errorf("Put: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := len(audit.Entries()); n != 160 {
		t.Errorf("%d audit entries, want 160", n)
	}
	// 50 burst plus at most 8 ms' worth of refill (< 1 token).
	if allowed != 50 {
		t.Errorf("%d resolutions allowed, want the burst of 50", allowed)
	}
}

func TestCredentialNeverPrintsSecret(t *testing.T) {
	c := cred("c1", Scope{Tenant: "t1"}, "a.example.com")
	var sb strings.Builder
	fmt.Fprintf(&sb, "%v %+v %#v %v %+v %s", &c, &c, c, c, []Credential{c}, c.String())
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	sb.Write(js)
	slog.New(slog.NewJSONHandler(&sb, nil)).Info("x", "cred", c)
	slog.New(slog.NewTextHandler(&sb, nil)).Info("x", "cred", &c)
	m := c.Metadata()
	fmt.Fprintf(&sb, "%v %d", m.Secret, len(c.Secret))
	if strings.Contains(sb.String(), "s3cret") {
		t.Errorf("secret printed: %s", sb.String())
	}
	if string(c.Secret) != "s3cret-c1" {
		t.Errorf("Metadata changed the original's secret to %q", c.Secret)
	}
	c.Zero()
	for _, b := range c.Secret {
		if b != 0 {
			t.Fatalf("Zero left %q", c.Secret)
		}
	}
}
