package readcache

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
	"github.com/spacesandbox/space/internal/store/storetest"
)

func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestConformance: the cached store keeps the whole Store contract.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return New(openSQLite(t), DefaultSize) })
}

// fixture is a tenant with a key and a sandbox, both read once so that
// both caches hold them.
type fixture struct {
	s      *Store
	tenant string
	key    store.APIKey
	sb     *sandbox.Sandbox
}

func newFixture(t *testing.T, b Backend) fixture {
	t.Helper()
	ctx := t.Context()
	s := New(b, DefaultSize)
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "acme", CreatedAt: time.Now().UTC()}
	must(t, s.CreateTenant(ctx, tn))
	must(t, s.CreateTemplate(ctx, store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady}))
	key := store.APIKey{ID: "k-0123456789abcdef", Tenant: tn.ID, Hash: "hash", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	must(t, s.CreateAPIKey(ctx, key))
	sb := sandbox.New(tn.ID, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 128}, time.Now())
	must(t, s.CreateSandbox(ctx, sb))
	f := fixture{s: s, tenant: tn.ID, key: key, sb: sb}
	f.warm(t)
	return f
}

// warm reads the key and the sandbox and checks both are cached.
func (f fixture) warm(t *testing.T) {
	t.Helper()
	if _, err := f.s.GetAPIKey(t.Context(), f.key.ID); err != nil {
		t.Fatalf("GetAPIKey: %v", err)
	}
	if _, err := f.s.GetSandbox(t.Context(), f.tenant, f.sb.ID); err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if k, s := f.s.Len(); k != 1 || s != 1 {
		t.Fatalf("after warming: %d keys, %d sandboxes cached, want 1 and 1", k, s)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestWritesDropWhatTheyChange: after each write that changes a cached
// answer, the very next read gives the new answer.
func TestWritesDropWhatTheyChange(t *testing.T) {
	moved := func(t *testing.T, f fixture, update func(context.Context, *sandbox.Sandbox) error) {
		sb, err := f.s.GetSandbox(t.Context(), f.tenant, f.sb.ID)
		must(t, err)
		sb.Node, sb.Generation, sb.State = "n2", sb.Generation+1, sandbox.StateRunning
		must(t, update(t.Context(), sb))
		got, err := f.s.GetSandbox(t.Context(), f.tenant, f.sb.ID)
		must(t, err)
		if got.Node != "n2" || got.Generation != sb.Generation || got.State != sandbox.StateRunning || got.Version != sb.Version {
			t.Errorf("after the update: node %q generation %d state %s version %d, want n2, %d, running, %d (served from the cache)",
				got.Node, got.Generation, got.State, got.Version, sb.Generation, sb.Version)
		}
	}
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, f fixture)
	}{
		{"RevokeAPIKey", func(t *testing.T, f fixture) {
			must(t, f.s.RevokeAPIKey(t.Context(), f.key.ID, time.Now()))
			k, err := f.s.GetAPIKey(t.Context(), f.key.ID)
			must(t, err)
			if !k.Revoked() {
				t.Errorf("key after RevokeAPIKey = %+v, want revoked (served from the cache)", k)
			}
		}},
		{"DeleteTenant", func(t *testing.T, f fixture) {
			must(t, f.s.DeleteSandbox(t.Context(), f.sb.ID))
			must(t, f.s.DeleteTenant(t.Context(), f.tenant))
			if k, err := f.s.GetAPIKey(t.Context(), f.key.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("key of a deleted tenant = %+v, %v; want ErrNotFound (served from the cache)", k, err)
			}
		}},
		{"UpdateSandbox", func(t *testing.T, f fixture) { moved(t, f, f.s.UpdateSandbox) }},
		{"UpdateSandboxWithinQuota", func(t *testing.T, f fixture) { moved(t, f, f.s.UpdateSandboxWithinQuota) }},
		{"UpdateSandboxAndEvents", func(t *testing.T, f fixture) {
			moved(t, f, func(ctx context.Context, sb *sandbox.Sandbox) error {
				return f.s.UpdateSandboxAndEvents(ctx, sb, []store.Event{{SandboxID: sb.ID, Time: time.Now(), Type: "state", Message: "moved"}})
			})
		}},
		{"DeleteSandbox", func(t *testing.T, f fixture) {
			must(t, f.s.DeleteSandbox(t.Context(), f.sb.ID))
			if sb, err := f.s.GetSandbox(t.Context(), f.tenant, f.sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("deleted sandbox = %+v, %v; want ErrNotFound (served from the cache)", sb, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.write(t, newFixture(t, openSQLite(t)))
		})
	}
}

// TestFailedWriteStillDrops: a write that returns an error may have
// committed (a context cancelled after the commit): it drops all the same.
func TestFailedWriteStillDrops(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	stale := f.sb.Clone()
	stale.Version = 99
	if err := f.s.UpdateSandbox(t.Context(), stale); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("UpdateSandbox of a stale version = %v, want ErrConflict", err)
	}
	if err := f.s.RevokeAPIKey(t.Context(), "k-nosuchkey000000", time.Now()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("RevokeAPIKey of a missing key = %v, want ErrNotFound", err)
	}
	if _, n := f.s.Len(); n != 0 {
		t.Errorf("%d sandboxes cached after a failed update, want 0", n)
	}
}

// TestOtherTenantIsNotFound: a cached sandbox is not another tenant's to read.
func TestOtherTenantIsNotFound(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	if sb, err := f.s.GetSandbox(t.Context(), sandbox.NewTenantID(), f.sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's GetSandbox = %+v, %v; want ErrNotFound", sb, err)
	}
}

// TestCallersGetCopies: what a caller does to the sandbox it got does not
// change what the next caller gets.
func TestCallersGetCopies(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	f.s.dropSandbox(f.sb.ID) // the first read below is a miss, the second a hit
	for range 2 {
		sb, err := f.s.GetSandbox(t.Context(), f.tenant, f.sb.ID)
		must(t, err)
		if sb.State != f.sb.State || sb.Env["X"] != "" {
			t.Fatalf("GetSandbox = state %s env %v: a caller's change reached the cache", sb.State, sb.Env)
		}
		sb.State = sandbox.StateFailed
		if sb.Env == nil {
			sb.Env = map[string]string{}
		}
		sb.Env["X"] = "changed"
	}
}

// TestBounded: neither cache grows past its size.
func TestBounded(t *testing.T) {
	b := openSQLite(t)
	s := New(b, 3)
	ctx := t.Context()
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "acme", CreatedAt: time.Now().UTC()}
	must(t, s.CreateTenant(ctx, tn))
	must(t, s.CreateTemplate(ctx, store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady}))
	for i := range 10 {
		k := store.APIKey{ID: "k-" + string(rune('a'+i)) + "123456789abcdef", Tenant: tn.ID, Hash: "h", CreatedAt: time.Now().UTC()}
		must(t, s.CreateAPIKey(ctx, k))
		sb := sandbox.New(tn.ID, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 128}, time.Now())
		must(t, s.CreateSandbox(ctx, sb))
		if _, err := s.GetAPIKey(ctx, k.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetSandbox(ctx, tn.ID, sb.ID); err != nil {
			t.Fatal(err)
		}
		if nk, ns := s.Len(); nk > 3 || ns > 3 {
			t.Fatalf("after %d reads: %d keys, %d sandboxes cached, want at most 3 each", i+1, nk, ns)
		}
	}
}

// slowReads is a backend whose GetSandbox, once armed, reads the row and
// then waits for release before answering: a read overtaken by a write.
type slowReads struct {
	Backend
	read, release chan struct{}
	armed         bool
}

func (b *slowReads) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	k, err := b.Backend.GetAPIKey(ctx, id)
	if b.armed {
		b.read <- struct{}{}
		<-b.release
	}
	return k, err
}

func (b *slowReads) GetSandbox(ctx context.Context, tenant, id string) (*sandbox.Sandbox, error) {
	sb, err := b.Backend.GetSandbox(ctx, tenant, id)
	if b.armed {
		b.read <- struct{}{}
		<-b.release
	}
	return sb, err
}

// TestReadOvertakenByAWrite: a read that began before a write and answers
// after it does not put the old row back into the cache.
func TestReadOvertakenByAWrite(t *testing.T) {
	b := &slowReads{Backend: openSQLite(t), read: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, b)
	f.s.dropSandbox(f.sb.ID)
	b.armed = true
	old := make(chan *sandbox.Sandbox)
	go func() {
		sb, _ := f.s.GetSandbox(context.Background(), f.tenant, f.sb.ID)
		old <- sb
	}()
	<-b.read // the reader has the old row
	b.armed = false
	sb := f.sb.Clone()
	sb.State = sandbox.StateFailed
	must(t, f.s.UpdateSandbox(t.Context(), sb))
	close(b.release)
	if got := <-old; got.State != f.sb.State {
		t.Fatalf("the overtaken read got state %s, want the old %q", got.State, f.sb.State)
	}
	got, err := f.s.GetSandbox(t.Context(), f.tenant, f.sb.ID)
	must(t, err)
	if got.State != sandbox.StateFailed {
		t.Errorf("after the write returned: state %s, want failed (the overtaken read put the old row back)", got.State)
	}
}

// TestKeyReadOvertakenByARevocation: the same for a key and its revocation.
func TestKeyReadOvertakenByARevocation(t *testing.T) {
	b := &slowReads{Backend: openSQLite(t), read: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, b)
	f.s.dropKey(f.key.ID)
	b.armed = true
	old := make(chan store.APIKey)
	go func() {
		k, _ := f.s.GetAPIKey(context.Background(), f.key.ID)
		old <- k
	}()
	<-b.read
	b.armed = false
	must(t, f.s.RevokeAPIKey(t.Context(), f.key.ID, time.Now()))
	close(b.release)
	if k := <-old; k.Revoked() {
		t.Fatalf("the overtaken read got a revoked key, want the key as it was")
	}
	k, err := f.s.GetAPIKey(t.Context(), f.key.ID)
	must(t, err)
	if !k.Revoked() {
		t.Errorf("after RevokeAPIKey returned: key not revoked (the overtaken read put the old row back)")
	}
}

// TestConcurrentReadsAndWrites (run with -race): while readers hammer the
// cache, every write is seen by the read right after it returns.
func TestConcurrentReadsAndWrites(t *testing.T) {
	f := newFixture(t, openSQLite(t))
	ctx := t.Context()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := f.s.GetSandbox(ctx, f.tenant, f.sb.ID); err != nil {
					t.Error(err)
					return
				}
				if _, err := f.s.GetAPIKey(ctx, f.key.ID); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	sb := f.sb.Clone()
	for i := range 200 {
		sb.Generation = uint64(i + 1)
		must(t, f.s.UpdateSandbox(ctx, sb))
		got, err := f.s.GetSandbox(ctx, f.tenant, sb.ID)
		must(t, err)
		if got.Version != sb.Version || got.Generation != sb.Generation {
			t.Fatalf("write %d: read version %d generation %d, want %d and %d", i, got.Version, got.Generation, sb.Version, sb.Generation)
		}
	}
	close(stop)
	wg.Wait()
}

// writes names every method of Backend that can change what GetAPIKey or
// GetSandbox answers; Store overrides each (writes.go) to drop the cache.
var writes = []string{
	"CreateAPIKey", "RevokeAPIKey", "DeleteTenant",
	"CreateSandbox", "CreateSandboxWithinQuota", "CreateSandboxWithinQuotaAndEvents",
	"UpdateSandbox", "UpdateSandboxWithinQuota", "UpdateSandboxAndEvents", "DeleteSandbox",
}

// unaffected names every other method, with why it changes neither answer.
var unaffected = map[string]string{
	"GetAPIKey": "the cached read", "GetSandbox": "the cached read",
	"GetMetricSeries": "read", "PutMetricSeries": "sandbox_metrics rows only (skips a sandbox with no row)",
	"Close": "no row", "CreateTenant": "no key or sandbox row", "GetTenant": "read", "ListTenants": "read",
	"SetTenantQuota": "tenant row only", "TenantUsage": "read", "ListAPIKeys": "read",
	"GetSandboxByID": "read, not cached", "ListSandboxes": "read, not cached",
	"CreateTemplate": "template rows", "SetTemplateEgress": "template rows", "SetTemplateProgress": "template rows",
	"GetTemplate": "read", "ListTemplates": "read", "UpdateTemplate": "template rows",
	"DeleteTemplate": "template rows (refused while a sandbox uses it)",
	"PutNode":        "node rows", "GetNode": "read", "ListNodes": "read", "NodeUsage": "read", "Heartbeat": "node rows",
	"DeleteNode": "node and report rows (sandboxes keep their node column)", "RecordHeartbeat": "node rows",
	"PutNodeReport": "report rows", "GetNodeReport": "read", "ListNodeReports": "read", "MarkNodeDown": "node rows",
	"PutIdempotency": "idempotency rows", "GetIdempotency": "read", "DeleteIdempotencyBefore": "idempotency rows",
	"AppendEvent": "event rows", "ListEvents": "read",
	"CreateSnapshot": "snapshot rows", "GetSnapshot": "read", "ListSnapshots": "read", "ListUnsettledSnapshots": "read",
	"UpdateSnapshot": "snapshot rows", "DeleteSnapshot": "snapshot and name rows",
	"SetSnapshotName": "name rows", "GetSnapshotName": "read", "ListSnapshotNames": "read",
	"CreateCredential": "credential rows", "GetCredential": "read", "ListCredentials": "read", "DeleteCredential": "credential rows",
	"PutServicePort": "port rows", "GetServicePort": "read", "ListServicePorts": "read", "DeleteServicePort": "port rows",
	"AcquireLease": "lease rows", "RenewLease": "lease rows", "ReleaseLease": "lease rows", "TakeOverLease": "lease rows",
	"PutReplicaAddresses": "replica rows", "ListReplicaAddresses": "read",
	"CreateTemplateBuild": "template build rows", "GetTemplateBuild": "read", "ListTemplateBuilds": "read", "ListRunningTemplateBuilds": "read",
	"UpdateTemplateBuild": "template build rows", "DeleteTemplateBuild": "template build rows",
}

// TestEveryMethodIsClassified: a method added to the contract fails here
// until someone decides whether it changes a cached answer; a write that
// does and is not overridden would serve stale keys or sandboxes.
func TestEveryMethodIsClassified(t *testing.T) {
	bt := reflect.TypeFor[Backend]()
	isWrite := map[string]bool{}
	for _, w := range writes {
		isWrite[w] = true
		if _, ok := bt.MethodByName(w); !ok {
			t.Errorf("writes names %s, which Backend does not have", w)
		}
	}
	for i := range bt.NumMethod() {
		name := bt.Method(i).Name
		if _, ok := unaffected[name]; !ok && !isWrite[name] {
			t.Errorf("Backend method %s is neither in writes nor in unaffected (readcache_test.go): if it can change an API key or a sandbox row, override it in writes.go to drop the cache", name)
		}
	}
	for name := range unaffected {
		if _, ok := bt.MethodByName(name); !ok {
			t.Errorf("unaffected names %s, which Backend does not have", name)
		}
	}
	// Listing a write is not enough: Store must declare it itself, not
	// promote the backend's.
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "writes.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil {
			declared[fn.Name.Name] = true
		}
	}
	for _, w := range writes {
		if !declared[w] {
			t.Errorf("write %s is not overridden in writes.go: the backend's would run without dropping the cache", w)
		}
	}
}
