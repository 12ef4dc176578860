package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// readyBuild records a ready build id of alias by tenant that made
// template (ready too), as internal/e2bapi does: waiting, then ready.
func readyBuild(t *testing.T, st store.Store, id, tenant, alias, template string, state store.TemplateBuildState) {
	t.Helper()
	ctx := t.Context()
	if err := st.CreateTemplate(ctx, store.Template{Name: template, Source: "builtin:minimal", State: store.TemplateReady, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	b := store.TemplateBuild{ID: id, TenantID: tenant, Alias: alias, Template: template, State: store.BuildWaiting}
	if err := st.CreateTemplateBuild(ctx, b); err != nil {
		t.Fatal(err)
	}
	if state == store.BuildWaiting {
		return
	}
	b.State = state
	if err := st.UpdateTemplateBuild(ctx, b); err != nil {
		t.Fatal(err)
	}
}

// TestAliasBuild: a name stands, for a tenant, for its latest ready build
// (by when it became ready, not when it was asked for); builds still
// running, failed ones and another tenant's are not looked at; a name no
// build of the tenant made stands for nothing (nil).
func TestAliasBuild(t *testing.T) {
	st, a, b := newTestStore(t)
	ctx := t.Context()
	readyBuild(t, st, "bld-1", a, "web", "web", store.BuildReady)
	readyBuild(t, st, "bld-2", a, "web", "web.slowslow", store.BuildWaiting) // asked for first, ready last
	readyBuild(t, st, "bld-3", a, "web", "web.aaaaaaaa", store.BuildReady)
	readyBuild(t, st, "bld-4", a, "web", "web.failfail", store.BuildError)
	readyBuild(t, st, "bld-5", a, "web", "web.runnning", store.BuildWaiting)
	readyBuild(t, st, "bld-6", b, "web", "web.bbbbbbbb", store.BuildReady)
	want := func(tenant, alias, template string) {
		t.Helper()
		got, err := AliasBuild(ctx, st, tenant, alias)
		switch {
		case err != nil:
			t.Fatalf("AliasBuild(%s, %s): %v", tenant, alias, err)
		case template == "" && got != nil:
			t.Errorf("AliasBuild(%s, %s) = %s (%s), want none", tenant, alias, got.ID, got.Template)
		case template != "" && (got == nil || got.Template != template):
			t.Errorf("AliasBuild(%s, %s) = %+v, want the build of %s", tenant, alias, got, template)
		}
	}
	want(a, "web", "web.aaaaaaaa")
	want(b, "web", "web.bbbbbbbb")
	want("t-other", "web", "")
	want(a, "api", "")

	slow := store.TemplateBuild{ID: "bld-2", TenantID: a, Alias: "web", Template: "web.slowslow", State: store.BuildReady}
	if err := st.UpdateTemplateBuild(ctx, slow); err != nil {
		t.Fatal(err)
	}
	want(a, "web", "web.slowslow")
}

// newAliasEnv is operations over a SQLite store with two tenants and
// the template minimal, whose creates a fake node starts.
func newAliasEnv(t testing.TB) (*Sandboxes, store.Store, []string, *askedPools) {
	db, err := sqlite.Open(t.Context(), t.TempDir()+"/space.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var st store.Store = db
	ids := make([]string, 2)
	for i := range ids {
		tn := store.Tenant{ID: sandbox.NewTenantID(), Name: string(rune('a' + i)), CreatedAt: time.Now().UTC()}
		if err := st.CreateTenant(t.Context(), tn); err != nil {
			t.Fatal(err)
		}
		ids[i] = tn.ID
	}
	if err := st.CreateTemplate(t.Context(), store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady, CreatedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	env := &raceEnv{st: st, tenant: ids[0], node: newRaceNode(nil)}
	env.putNode(t.Context(), t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := reconcile.New(reconcile.Config{Workers: 1, StartTimeout: 5 * time.Second, NodeLostAfter: -1, SingleReplica: true},
		st, func(string) (reconcile.NodeAPI, error) { return env.node, nil }, log)
	pools := &askedPools{}
	svc := New(Config{DefaultRuntime: "ns"}, st, rec, pools, time.Now(), log)
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
	return svc, st, ids, pools
}

// askedPools is a Heartbeats that records which warm pools placement
// asked for (a create claims a warm sandbox of the pool it asks for).
type askedPools struct {
	raceBeats
	mu   sync.Mutex
	keys []nodev1.PoolKey
}

func (p *askedPools) WarmNodes(k nodev1.PoolKey) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, k)
	return nil
}

// last is the pool placement asked for last.
func (p *askedPools) last() nodev1.PoolKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.keys) == 0 {
		return nodev1.PoolKey{}
	}
	return p.keys[len(p.keys)-1]
}

// TestCreateFollowsAliasBuilds: SPACE's own create of a name an E2B build
// made starts the tenant's latest ready build of it and records that
// template; another tenant's create of the name is not moved by those
// builds; a retry with the same Idempotency-Key after a rebuild became
// ready finds the first attempt's sandbox instead of a conflict; the
// create claims from the warm pool of the concrete template.
func TestCreateFollowsAliasBuilds(t *testing.T) {
	svc, st, ids, pools := newAliasEnv(t)
	a, b := ids[0], ids[1]
	readyBuild(t, st, "bld-1", a, "web", "web", store.BuildReady)
	readyBuild(t, st, "bld-2", a, "web", "web.aaaaaaaa", store.BuildReady)

	create := func(tenant, key string) *sandbox.Sandbox {
		t.Helper()
		sb, err := svc.Create(t.Context(), Caller{Tenant: tenant}, CreateParams{Key: key,
			CreateSandboxRequest: sandboxv1.CreateSandboxRequest{Template: "web", Runtime: "ns", CPUs: 1, MemoryMiB: 256}})
		if err != nil {
			t.Fatalf("create of web by %s: %v", tenant, err)
		}
		return sb
	}
	sb := create(a, "k1")
	if sb.Template != "web.aaaaaaaa" {
		t.Errorf("tenant a's create of web started %s, want its latest build's web.aaaaaaaa", sb.Template)
	}
	if k := pools.last(); k.Template != "web.aaaaaaaa" {
		t.Errorf("tenant a's create of web claims from the warm pool of %q, want web.aaaaaaaa's", k.Template)
	}
	if got, err := st.GetSandboxByID(t.Context(), sb.ID); err != nil || got.Template != "web.aaaaaaaa" {
		t.Errorf("the record of tenant a's sandbox names template %q (%v), want web.aaaaaaaa", got.Template, err)
	}
	if other := create(b, ""); other.Template != "web" {
		t.Errorf("tenant b's create of web started %s, want web: a's builds never change what it means for b", other.Template)
	}

	readyBuild(t, st, "bld-3", a, "web", "web.cccccccc", store.BuildReady)
	if again := create(a, "k1"); again.ID != sb.ID || again.Template != "web.aaaaaaaa" {
		t.Errorf("a retry with key k1 after a rebuild got %s of %s, want the first attempt's %s of web.aaaaaaaa", again.ID, again.Template, sb.ID)
	}
	if next := create(a, ""); next.Template != "web.cccccccc" {
		t.Errorf("tenant a's create of web after the rebuild started %s, want web.cccccccc", next.Template)
	}
}

// BenchmarkCreateAliasLookup is what resolving a create's template name
// (AliasBuild) costs next to the create it is part of: a create of
// minimal on a fake node, and the lookup alone of a name no build made
// and of an alias with 11 builds (the most pruneBuilds keeps), in
// interleaved rounds. Run it with a count (-benchtime 300x): the creates'
// sandboxes stay in the store, and a create slows as they pile up.
func BenchmarkCreateAliasLookup(b *testing.B) {
	svc, st, ids, _ := newAliasEnv(b)
	for i := range 11 {
		r := store.TemplateBuild{ID: fmt.Sprint("bld-", i), TenantID: ids[0], Alias: "web", Template: fmt.Sprint("web.", i), State: store.BuildWaiting}
		if err := st.CreateTemplateBuild(b.Context(), r); err != nil {
			b.Fatal(err)
		}
		r.State = store.BuildReady
		if err := st.UpdateTemplateBuild(b.Context(), r); err != nil {
			b.Fatal(err)
		}
	}
	caller := Caller{Tenant: ids[0]}
	rounds := []struct {
		name string
		run  func() error
	}{
		{"create", func() error {
			_, err := svc.Create(b.Context(), caller, CreateParams{CreateSandboxRequest: sandboxv1.CreateSandboxRequest{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}})
			return err
		}},
		{"lookup-nobuild", func() error { _, err := AliasBuild(b.Context(), st, ids[0], "minimal"); return err }},
		{"lookup-11builds", func() error { _, err := AliasBuild(b.Context(), st, ids[0], "web"); return err }},
	}
	for range 2 {
		for _, r := range rounds {
			b.Run(r.name, func(b *testing.B) {
				for b.Loop() {
					if err := r.run(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
