package service

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/objstore/filestore"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// countingStore is a SQLite store that counts its sandbox and event writes,
// each a commit of its own.
type countingStore struct {
	*sqlite.Store
	mu     sync.Mutex
	writes map[string]int
	reads  map[string]int
}

func (c *countingStore) count(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes[op]++
}

func (c *countingStore) total() (n int, by map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	by = map[string]int{}
	for k, v := range c.writes {
		n += v
		by[k] = v
	}
	return n, by
}

// reads counts the store's reads by method.
func (c *countingStore) read(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads[op]++
}

func (c *countingStore) GetSandboxByID(ctx context.Context, id string) (*sandbox.Sandbox, error) {
	c.read("GetSandboxByID")
	return c.Store.GetSandboxByID(ctx, id)
}

func (c *countingStore) GetTemplate(ctx context.Context, name string) (store.Template, error) {
	c.read("GetTemplate")
	return c.Store.GetTemplate(ctx, name)
}

func (c *countingStore) ListNodes(ctx context.Context) ([]store.Node, error) {
	c.read("ListNodes")
	return c.Store.ListNodes(ctx)
}

func (c *countingStore) NodeUsage(ctx context.Context) (map[string]store.Usage, error) {
	c.read("NodeUsage")
	return c.Store.NodeUsage(ctx)
}

func (c *countingStore) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	c.read("GetTenant")
	return c.Store.GetTenant(ctx, id)
}

func (c *countingStore) TenantUsage(ctx context.Context, tenant string) (store.Usage, error) {
	c.read("TenantUsage")
	return c.Store.TenantUsage(ctx, tenant)
}

func (c *countingStore) CreateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	c.count("CreateSandbox")
	return c.Store.CreateSandbox(ctx, sb)
}

func (c *countingStore) CreateSandboxWithinQuota(ctx context.Context, sb *sandbox.Sandbox) error {
	c.count("CreateSandboxWithinQuota")
	return c.Store.CreateSandboxWithinQuota(ctx, sb)
}

func (c *countingStore) CreateSandboxWithinQuotaAndEvents(ctx context.Context, sb *sandbox.Sandbox, events []store.Event) error {
	c.count("CreateSandboxWithinQuotaAndEvents")
	return c.Store.CreateSandboxWithinQuotaAndEvents(ctx, sb, events)
}

func (c *countingStore) UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox) error {
	c.count("UpdateSandbox")
	return c.Store.UpdateSandbox(ctx, sb)
}

func (c *countingStore) UpdateSandboxWithinQuota(ctx context.Context, sb *sandbox.Sandbox) error {
	c.count("UpdateSandboxWithinQuota")
	return c.Store.UpdateSandboxWithinQuota(ctx, sb)
}

func (c *countingStore) UpdateSandboxAndEvents(ctx context.Context, sb *sandbox.Sandbox, events []store.Event) error {
	c.count("UpdateSandboxAndEvents")
	return c.Store.UpdateSandboxAndEvents(ctx, sb, events)
}

func (c *countingStore) AppendEvent(ctx context.Context, e store.Event) (store.Event, error) {
	c.count("AppendEvent")
	return c.Store.AppendEvent(ctx, e)
}

// TestCreateCommitsTwice: a create that its node starts at once costs two
// store commits — the sandbox recorded with its first events before the
// node is asked, and the settled state with its "running" event — however
// many events it has; the events are all there, in order; its tenant is
// read once.
func TestCreateCommitsTwice(t *testing.T) {
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := &countingStore{Store: db, writes: map[string]int{}, reads: map[string]int{}}
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "a", CreatedAt: time.Now().UTC()}
	if err := st.CreateTenant(t.Context(), tn); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateTemplate(t.Context(), store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	objs, err := filestore.Open(t.Context(), filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	env := &raceEnv{st: st, tenant: tn.ID, node: newRaceNode(objs)}
	env.putNode(t.Context(), t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := reconcile.New(reconcile.Config{Workers: 1, StartTimeout: 5 * time.Second, NodeLostAfter: -1, SingleReplica: true, Objects: objs},
		st, func(string) (reconcile.NodeAPI, error) { return env.node, nil }, log)
	svc := New(Config{DefaultRuntime: "ns"}, st, rec, raceBeats{}, time.Now(), log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		rec.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	before, _ := st.total()
	st.mu.Lock()
	clear(st.reads)
	st.mu.Unlock()
	sb, err := svc.Create(t.Context(), Caller{Tenant: tn.ID}, CreateParams{CreateSandboxRequest: sandboxv1.CreateSandboxRequest{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != sandbox.StateRunning {
		t.Fatalf("created sandbox is %s (%s), want running", sb.State, sb.Reason)
	}
	after, by := st.total()
	if after-before != 2 || by["CreateSandboxWithinQuotaAndEvents"] != 1 || by["UpdateSandboxAndEvents"] != 1 {
		t.Errorf("a create wrote the store %d times (%v), want 2: the sandbox with its events, then its settled state with its event", after-before, by)
	}
	st.mu.Lock()
	t.Logf("the create's store reads: %v", st.reads)
	if n := st.reads["GetTenant"]; n != 1 {
		t.Errorf("the create read its tenant %d times, want once (quota check and placement share it)", n)
	}
	st.mu.Unlock()
	events, err := st.ListEvents(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	if len(types) != 2 || types[0] != "scheduled" || types[1] != "state" {
		t.Errorf("events of the create: %v, want scheduled then state", types)
	}
}
