package credentials

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestApplies(t *testing.T) {
	tenant := cred("c-tenant", Scope{Tenant: "t1"}, "api.example.com", "*.svc.example.org")
	sandbox := cred("c-sandbox", Scope{Tenant: "t1", Sandbox: "sb1"}, "10.1.2.3")
	expired := cred("c-expired", Scope{Tenant: "t1", Project: "p1"}, "old.example.com")
	expired.ExpiresAt = t0.Add(time.Minute)
	otherTenant := cred("c-other", Scope{Tenant: "t2"}, "t2.example.com")
	m, _, audit, clk := newTestManager(t, tenant, sandbox, expired, otherTenant)
	clk.Advance(time.Hour) // c-expired is now expired

	tests := []struct {
		name string
		req  Request
		want bool
	}{
		{"exact host", Request{Tenant: "t1", Host: "api.example.com"}, true},
		{"case and trailing dot", Request{Tenant: "t1", Host: "API.Example.COM."}, true},
		{"wildcard", Request{Tenant: "t1", Host: "a.b.svc.example.org"}, true},
		{"wildcard apex", Request{Tenant: "t1", Host: "svc.example.org"}, false},
		{"other host", Request{Tenant: "t1", Host: "example.com"}, false},
		{"sandbox ip", Request{Tenant: "t1", Sandbox: "sb1", Host: "10.1.2.3"}, true},
		{"other sandbox", Request{Tenant: "t1", Sandbox: "sb2", Host: "10.1.2.3"}, false},
		{"expired", Request{Tenant: "t1", Project: "p1", Host: "old.example.com"}, false},
		{"other tenant", Request{Tenant: "t1", Host: "t2.example.com"}, false},
		{"nothing in scope", Request{Tenant: "t9", Host: "api.example.com"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := m.Applies(context.Background(), tt.req)
			if err != nil {
				t.Fatalf("Applies(%+v): %v", tt.req, err)
			}
			if got != tt.want {
				t.Errorf("Applies(%+v) = %v, want %v", tt.req, got, tt.want)
			}
		})
	}
	if n := len(audit.Entries()); n != 0 {
		t.Errorf("audit has %d entries after Applies, want 0", n)
	}
}

func TestAppliesExpiredFallsBackToLiveCredential(t *testing.T) {
	const host = "api.example.com"
	old := cred("c-sandbox", Scope{Tenant: "t1", Sandbox: "sb1"}, host)
	old.ExpiresAt = t0.Add(time.Minute)
	live := cred("c-tenant", Scope{Tenant: "t1"}, host)
	m, _, _, clk := newTestManager(t, old, live)
	clk.Advance(time.Hour)
	got, err := m.Applies(context.Background(), Request{Tenant: "t1", Sandbox: "sb1", Host: host})
	if err != nil || !got {
		t.Fatalf("Applies = %v, %v; want true (the tenant credential is live)", got, err)
	}
}

func TestAppliesChargesNoRateLimit(t *testing.T) {
	const host = "api.example.com"
	c := cred("c1", Scope{Tenant: "t1"}, host)
	c.RateLimit = 1
	m, _, audit, _ := newTestManager(t, c)
	req := Request{Tenant: "t1", Host: host}
	for i := range 5 {
		if ok, err := m.Applies(context.Background(), req); err != nil || !ok {
			t.Fatalf("Applies #%d = %v, %v; want true", i, ok, err)
		}
	}
	got, err := m.Resolve(context.Background(), req)
	if err != nil {
		t.Fatalf("Resolve after Applies: %v; Applies must not take the one token", err)
	}
	got.Zero()
	if _, err := m.Resolve(context.Background(), req); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("second Resolve: %v, want ErrResourceExhausted", err)
	}
	// A rate-limited credential still applies: Resolve refuses each request.
	if ok, err := m.Applies(context.Background(), req); err != nil || !ok {
		t.Errorf("Applies while rate limited = %v, %v; want true", ok, err)
	}
	if n := len(audit.Entries()); n != 2 {
		t.Errorf("audit has %d entries, want 2 (the Resolves only)", n)
	}
}

// failingBackend fails every List.
type failingBackend struct{ MemoryBackend }

func (*failingBackend) List(context.Context, Scope) ([]Credential, error) {
	return nil, errors.New("vault sealed")
}

func TestAppliesErrors(t *testing.T) {
	m, _, _, _ := newTestManager(t)
	for _, req := range []Request{
		{Host: "api.example.com"},                       // no tenant
		{Tenant: "t1", Host: ""},                        // no host
		{Tenant: "t1", Host: "bad host"},                // not a host
		{Tenant: "t1", Host: "api.example.com:443"},     // a port
		{Tenant: "t/1", Host: "api.example.com"},        // bad id
		{Tenant: "t1", ExecutionID: "e 1", Host: "a.b"}, // bad execution id
	} {
		if _, err := m.Applies(context.Background(), req); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Applies(%+v) error = %v, want ErrInvalidArgument", req, err)
		}
	}
	bad := NewManager(&failingBackend{}, &MemoryAuditLog{})
	if _, err := bad.Applies(context.Background(), Request{Tenant: "t1", Host: "api.example.com"}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Applies with a failing backend: %v, want ErrUnavailable", err)
	}
}
