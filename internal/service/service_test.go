package service

import (
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// newTestStore is a real SQLite store with tenants a and b and the ready
// template "minimal" that stored's sandboxes name (a create or fork checks
// that its template exists).
func newTestStore(t *testing.T) (st store.Store, a, b string) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var ids [2]string
	for i, name := range []string{"a", "b"} {
		tn := store.Tenant{ID: sandbox.NewTenantID(), Name: name, CreatedAt: time.Now().UTC()}
		if err := st.CreateTenant(t.Context(), tn); err != nil {
			t.Fatal(err)
		}
		ids[i] = tn.ID
	}
	if err := st.CreateTemplate(t.Context(), store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	return st, ids[0], ids[1]
}

// stored records a sandbox of tenant in state.
func stored(t *testing.T, st store.Store, tenant string, state sandbox.State) *sandbox.Sandbox {
	t.Helper()
	sb := sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
	sb.State, sb.Desired, sb.Node = state, state, "n1"
	if err := st.CreateSandbox(t.Context(), sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestGetIsTenantScoped: a sandbox is visible to its tenant only; another
// tenant's, a deleted one and a malformed id are all the same NotFound.
func TestGetIsTenantScoped(t *testing.T) {
	st, a, b := newTestStore(t)
	s := New(Config{}, st, nil, nil, time.Now(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	mine := stored(t, st, a, sandbox.StateRunning)
	gone := stored(t, st, a, sandbox.StateDeleted)
	ctx := t.Context()
	if got, err := s.Get(ctx, Caller{Tenant: a}, mine.ID); err != nil || got.ID != mine.ID {
		t.Fatalf("Get own sandbox = %v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		c    Caller
		id   string
	}{
		{"another tenant's", Caller{Tenant: b}, mine.ID},
		{"another tenant's, as an admin of its own", Caller{Tenant: b, Admin: true}, mine.ID},
		{"deleted", Caller{Tenant: a}, gone.ID},
		{"malformed id", Caller{Tenant: a}, "../" + mine.ID},
		{"missing", Caller{Tenant: a}, sandbox.NewID()},
	} {
		if _, err := s.Get(ctx, tc.c, tc.id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Get %s: %v, want NotFound", tc.name, err)
		}
	}
	list, err := s.List(ctx, Caller{Tenant: a})
	if err != nil || len(list) != 1 || list[0].ID != mine.ID {
		t.Errorf("List = %d sandboxes (%v), want only the live one of the tenant", len(list), err)
	}
	if list, err := s.List(ctx, Caller{Tenant: b}); err != nil || len(list) != 0 {
		t.Errorf("List of the other tenant = %d sandboxes (%v), want none", len(list), err)
	}
}

// TestTenantFor: a caller acts on its own tenant; only an admin names
// another, and only one that exists.
func TestTenantFor(t *testing.T) {
	st, a, b := newTestStore(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name  string
		c     Caller
		asked string
		want  string
		class error
	}{
		{"own, implied", Caller{Tenant: a}, "", a, nil},
		{"own, named", Caller{Tenant: a}, a, a, nil},
		{"another, not admin", Caller{Tenant: a}, b, "", errdefs.ErrPermissionDenied},
		{"another, admin", Caller{Tenant: a, Admin: true}, b, b, nil},
		{"missing, admin", Caller{Tenant: a, Admin: true}, sandbox.NewTenantID(), "", errdefs.ErrNotFound},
	} {
		got, err := TenantFor(ctx, st, tc.c, tc.asked)
		if got != tc.want || (tc.class == nil) != (err == nil) || tc.class != nil && !errors.Is(err, tc.class) {
			t.Errorf("%s: TenantFor = %q, %v; want %q, %v", tc.name, got, err, tc.want, tc.class)
		}
	}
}

// TestPortRule: the exposed port wins; an HTTP request falls back to the
// rule for every HTTP port, a TCP one never; a deleting sandbox has none.
func TestPortRule(t *testing.T) {
	st, a, _ := newTestStore(t)
	s := New(Config{}, st, nil, nil, time.Now(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := t.Context()
	sb := stored(t, st, a, sandbox.StateRunning)
	for _, sp := range []store.ServicePort{
		{Sandbox: sb.ID, Port: 8080, Protocol: "tcp", CreatedAt: time.Now().UTC()},
		{Sandbox: sb.ID, Port: AnyPort, Protocol: "http", Public: true, CreatedAt: time.Now().UTC()},
	} {
		if err := st.PutServicePort(ctx, sp); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		port     int
		protocol string
		want     int // the rule's port; -1: NotFound
	}{
		{8080, "tcp", 8080},
		{8080, "http", 8080},
		{9000, "http", AnyPort},
		{9000, "tcp", -1},
	} {
		_, sp, err := s.PortRule(ctx, sb.ID, tc.port, tc.protocol)
		switch {
		case tc.want < 0 && !errors.Is(err, errdefs.ErrNotFound):
			t.Errorf("PortRule(%d, %s) = port %d, %v; want NotFound", tc.port, tc.protocol, sp.Port, err)
		case tc.want >= 0 && (err != nil || sp.Port != tc.want):
			t.Errorf("PortRule(%d, %s) = port %d, %v; want the rule of port %d", tc.port, tc.protocol, sp.Port, err, tc.want)
		}
	}
	sb.State = sandbox.StateDeleting
	if err := st.UpdateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PortRule(ctx, sb.ID, 8080, "tcp"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("PortRule of a deleting sandbox: %v, want NotFound", err)
	}
}

// TestPortTokens: a token matches only its own hash, and an empty stored
// hash (a public port, the rule for every port) matches nothing.
func TestPortTokens(t *testing.T) {
	tok, other := newPortToken(), newPortToken()
	h := HashPortToken(tok)
	if !PortTokenMatches(tok, h) || PortTokenMatches(other, h) || PortTokenMatches("", "") || PortTokenMatches(tok, "") {
		t.Errorf("PortTokenMatches: want true for the token's own hash only")
	}
	if len(tok) < len(PortTokenPrefix)+40 || tok[:len(PortTokenPrefix)] != PortTokenPrefix || tok == other {
		t.Errorf("newPortToken = %q: want %s and 256 random bits", tok, PortTokenPrefix)
	}
}

// TestOpenHTTPPortsIsTenantScoped: only the sandbox's tenant records its
// rule for every HTTP port; another's attempt is NotFound and writes none.
func TestOpenHTTPPortsIsTenantScoped(t *testing.T) {
	st, a, b := newTestStore(t)
	s := New(Config{}, st, nil, nil, time.Now(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx := t.Context()
	sb := stored(t, st, a, sandbox.StateRunning)
	if err := s.OpenHTTPPorts(ctx, Caller{Tenant: b}, sb.ID, HTTPPorts{Public: true}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("OpenHTTPPorts by another tenant: %v, want NotFound", err)
	}
	if _, ok, err := s.HTTPPortsRule(ctx, sb.ID); err != nil || ok {
		t.Fatalf("after another tenant's attempt: rule recorded %v (%v), want none", ok, err)
	}
	want := HTTPPorts{HostMask: "${PORT}-app.example.com"}
	if err := s.OpenHTTPPorts(ctx, Caller{Tenant: a}, sb.ID, want); err != nil {
		t.Fatal(err)
	}
	if rule, ok, err := s.HTTPPortsRule(ctx, sb.ID); err != nil || !ok || rule != want {
		t.Errorf("rule = %+v, recorded %v (%v); want %+v", rule, ok, err, want)
	}
}
