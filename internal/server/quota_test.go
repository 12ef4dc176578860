package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/postgres"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
)

// adminKey mints an admin key in a tenant of its own.
func (cp *controlPlane) adminKey() string {
	cp.t.Helper()
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "operators", CreatedAt: time.Now().UTC()}
	if err := cp.st.CreateTenant(cp.t.Context(), tn); err != nil {
		cp.t.Fatal(err)
	}
	_, key, err := service.MintKey(cp.t.Context(), cp.st, tn.ID, true)
	if err != nil {
		cp.t.Fatal(err)
	}
	return key
}

// setQuota sets cp.tenant's quota with the admin key.
func (cp *controlPlane) setQuota(admin, body string) sandboxv1.Tenant {
	cp.t.Helper()
	var out sandboxv1.Tenant
	if code, e := cp.do(admin, http.MethodPut, "/v1/tenants/"+cp.tenant+"/quota", body, &out); code != http.StatusOK {
		cp.t.Fatalf("PUT quota %s: HTTP %d %+v", body, code, e)
	}
	return out
}

// wantQuotaRefusal fails unless the answer is 429 resource_exhausted (reason
// quota_exceeded) with a message naming the limit and the way out.
func wantQuotaRefusal(t *testing.T, what string, code int, e sandboxv1.Error, limit string) {
	t.Helper()
	if code != http.StatusTooManyRequests || e.Code != sandboxv1.CodeResourceExhausted || e.Reason != "quota_exceeded" {
		t.Fatalf("%s: HTTP %d %+v; want 429 resource_exhausted, reason quota_exceeded", what, code, e)
	}
	for _, want := range []string{limit, "usage", "delete or hibernate a sandbox, or ask an admin to raise the quota"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("%s: message %q does not say %q", what, e.Message, want)
		}
	}
}

func TestQuotaAdminAPI(t *testing.T) {
	cp := newControlPlane(t, Config{})
	admin := cp.adminKey()
	// A tenant cannot set, let alone raise, its own quota.
	code, e := cp.do(cp.key, http.MethodPut, "/v1/tenants/"+cp.tenant+"/quota", `{"max_sandboxes": 100}`, nil)
	if code != http.StatusForbidden {
		t.Fatalf("tenant sets its own quota: HTTP %d %+v, want 403", code, e)
	}
	cp.create(`{"template": "minimal", "memory_mib": 256, "cpus": 1}`)
	got := cp.setQuota(admin, `{"max_sandboxes": 2, "max_memory_mib": 1024, "max_cpus": 0}`)
	want := sandboxv1.Quota{MaxSandboxes: 2, MaxMemoryMiB: 1024}
	if got.ID != cp.tenant || got.Quota != want || got.Usage != (sandboxv1.Usage{Sandboxes: 1, MemoryMiB: 256, CPUs: 1}) {
		t.Errorf("PUT quota = %+v, want quota %+v and usage 1/256/1", got, want)
	}
	var list sandboxv1.TenantList
	if code, e := cp.do(admin, http.MethodGet, "/v1/tenants", "", &list); code != http.StatusOK {
		t.Fatalf("GET /v1/tenants: HTTP %d %+v", code, e)
	}
	found := false
	for _, tn := range list.Tenants {
		if tn.ID == cp.tenant {
			found = tn.Quota == want && tn.Usage.Sandboxes == 1
		}
	}
	if !found {
		t.Errorf("GET /v1/tenants = %+v; want %s with quota %+v and 1 sandbox", list, cp.tenant, want)
	}
	for _, tc := range []struct {
		path, body string
		want       int
	}{
		{"/v1/tenants/" + cp.tenant + "/quota", `{"max_sandboxes": -1, "max_memory_mib": 0, "max_cpus": 0}`, http.StatusBadRequest},
		{"/v1/tenants/" + cp.tenant + "/quota", `{"max_sandboxes": 1, "bogus": 1}`, http.StatusBadRequest},
		{"/v1/tenants/" + cp.tenant + "/quota", `{"max_cpus": 1e99}`, http.StatusBadRequest},
		{"/v1/tenants/t-doesnotexist0000/quota", `{"max_sandboxes": 1}`, http.StatusNotFound},
		{"/v1/tenants/..%2f/quota", `{"max_sandboxes": 1}`, http.StatusNotFound},
	} {
		if code, e := cp.do(admin, http.MethodPut, tc.path, tc.body, nil); code != tc.want {
			t.Errorf("PUT %s %s: HTTP %d %+v, want %d", tc.path, tc.body, code, e, tc.want)
		}
	}
}

func TestQuotaRefusesCreate(t *testing.T) {
	cp := newControlPlane(t, Config{})
	admin := cp.adminKey()
	cp.setQuota(admin, `{"max_sandboxes": 2, "max_memory_mib": 768, "max_cpus": 0}`)
	a := cp.create(`{"template": "minimal", "memory_mib": 256}`)
	cp.create(`{"template": "minimal", "memory_mib": 256}`)
	code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes", `{"template": "minimal", "memory_mib": 256}`, nil)
	wantQuotaRefusal(t, "third create", code, e, "at most 2 running sandboxes")
	// The refusal is not remembered under an Idempotency-Key: the retry
	// runs again once there is room (below).
	if code := cp.createWithKey("quota-retry"); code != http.StatusTooManyRequests {
		t.Fatalf("create with an Idempotency-Key over quota: HTTP %d, want 429", code)
	}
	// Another tenant is not limited.
	if code, e := cp.do(cp.other, http.MethodPost, "/v1/sandboxes", `{"template": "minimal", "memory_mib": 256}`, nil); code != http.StatusCreated {
		t.Fatalf("other tenant's create: HTTP %d %+v", code, e)
	}
	cp.setQuota(admin, `{"max_sandboxes": 5, "max_memory_mib": 768, "max_cpus": 0}`)
	code, e = cp.do(cp.key, http.MethodPost, "/v1/sandboxes", `{"template": "minimal", "memory_mib": 512}`, nil)
	wantQuotaRefusal(t, "create over memory", code, e, "at most 768 MiB")
	// The scheduler's explanation reports the tenant's standing.
	var c sandboxv1.Sandbox
	if code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes", `{"template": "minimal", "memory_mib": 256}`, &c); code != http.StatusCreated {
		t.Fatalf("create within quota: HTTP %d %+v", code, e)
	}
	var events sandboxv1.EventList
	cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+c.ID+"/events", "", &events)
	if !hasEvent(events, "scheduled", "holds 2 sandboxes, 512 MiB") || !hasEvent(events, "scheduled", "quota 5 sandboxes, 768 MiB") {
		t.Errorf("events = %+v; want a scheduled event with the tenant's usage and quota", events)
	}
	// Deleting a sandbox makes room.
	if code, e := cp.do(cp.key, http.MethodDelete, "/v1/sandboxes/"+a.ID, "", nil); code != http.StatusNoContent {
		t.Fatalf("delete: HTTP %d %+v", code, e)
	}
	if code := cp.createWithKey("quota-retry"); code != http.StatusCreated {
		t.Fatalf("retried create with the same Idempotency-Key after a delete: HTTP %d, want 201", code)
	}
}

// createWithKey creates a 256 MiB sandbox with an Idempotency-Key and
// returns the HTTP status.
func (cp *controlPlane) createWithKey(key string) int {
	cp.t.Helper()
	req, err := http.NewRequest(http.MethodPost, cp.url+"/v1/sandboxes", strings.NewReader(`{"template": "minimal", "memory_mib": 256}`))
	if err != nil {
		cp.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cp.key)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cp.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// storeStopped stores a sandbox of cp.tenant in state st (stopped or
// hibernated) with a ready disk snapshot on node n1 to start from.
func (cp *controlPlane) storeStopped(st sandbox.State) *sandbox.Sandbox {
	cp.t.Helper()
	ctx := cp.t.Context()
	sb := sandbox.New(cp.tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256, DiskMiB: 512}, time.Now())
	snap := store.Snapshot{ID: sandbox.NewSnapshotID(), SandboxID: sb.ID, Tenant: cp.tenant, Kind: store.SnapshotDisk, Tier: "stop",
		State: store.SnapshotReady, Node: "n1", Runtime: "ns", Template: "minimal", CPUs: 1, MemoryMiB: 256, Generation: 1, CreatedAt: time.Now().UTC()}
	if err := cp.st.CreateSnapshot(ctx, snap); err != nil {
		cp.t.Fatal(err)
	}
	sb.State, sb.Desired, sb.Node, sb.StartFrom = st, st, "n1", snap.ID
	if err := cp.st.CreateSandbox(ctx, sb); err != nil {
		cp.t.Fatal(err)
	}
	return sb
}

func TestQuotaRefusesStartRestoreResumeFork(t *testing.T) {
	cp := newControlPlane(t, Config{})
	admin := cp.adminKey()
	running := cp.create(`{"template": "minimal", "memory_mib": 256}`)
	stopped := cp.storeStopped(sandbox.StateStopped)
	hibernated := cp.storeStopped(sandbox.StateHibernated)
	cp.setQuota(admin, `{"max_sandboxes": 1, "max_memory_mib": 0, "max_cpus": 0}`)
	for _, tc := range []struct{ what, path, body string }{
		{"start after stop", "/v1/sandboxes/" + stopped.ID + "/start", ""},
		{"restore after hibernate", "/v1/sandboxes/" + hibernated.ID + "/restore", ""},
		{"resume after hibernate", "/v1/sandboxes/" + hibernated.ID + "/resume", ""},
		{"rollback of a stopped sandbox", "/v1/sandboxes/" + stopped.ID + "/rollback", `{"snapshot": "` + stopped.StartFrom + `"}`},
		{"fork", "/v1/sandboxes/" + running.ID + "/fork", ""},
		{"fork from a snapshot", "/v1/sandboxes/" + stopped.ID + "/fork", `{"snapshot": "` + stopped.StartFrom + `"}`},
	} {
		code, e := cp.do(cp.key, http.MethodPost, tc.path, tc.body, nil)
		wantQuotaRefusal(t, tc.what, code, e, "at most 1 running sandboxes")
	}
	for _, sb := range []*sandbox.Sandbox{stopped, hibernated} {
		got, err := cp.st.GetSandboxByID(t.Context(), sb.ID)
		if err != nil || got.State != sb.State || got.Generation != sb.Generation {
			t.Errorf("refused sandbox %s is now %+v, %v; want unchanged %s", sb.ID, got, err, sb.State)
		}
	}
	// Operations that keep holding resources are not refused over quota.
	cp.setQuota(admin, `{"max_sandboxes": 0, "max_memory_mib": 1, "max_cpus": 0}`)
	if code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes/"+running.ID+"/timeout", `{"timeout": "1h"}`, nil); code != http.StatusOK {
		t.Errorf("timeout of a running sandbox over quota: HTTP %d %+v", code, e)
	}
	// With room, the start goes through.
	cp.setQuota(admin, `{"max_sandboxes": 2, "max_memory_mib": 0, "max_cpus": 0}`)
	var out sandboxv1.Sandbox
	if code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes/"+stopped.ID+"/start", "", &out); code != http.StatusOK || out.State != sandboxv1.StateRunning {
		t.Fatalf("start within quota: HTTP %d %+v, state %s", code, e, out.State)
	}
	code, e := cp.do(cp.key, http.MethodPost, "/v1/sandboxes/"+hibernated.ID+"/restore", "", nil)
	wantQuotaRefusal(t, "restore at the limit", code, e, "at most 2 running sandboxes")
}

// TestQuotaConcurrentCreates races creates for the last slots on SQLite:
// exactly the quota's worth are admitted, the others refused with 429.
func TestQuotaConcurrentCreates(t *testing.T) {
	raceCreates(newControlPlane(t, Config{}))
}

// TestQuotaConcurrentCreatesPostgres is TestQuotaConcurrentCreates on a
// real PostgreSQL server, whose SERIALIZABLE transactions must serialize
// the admissions as SQLite's single writer does.
func TestQuotaConcurrentCreatesPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	db, err := srv.CreateDatabase(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	st, err := postgres.Open(t.Context(), srv.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	raceCreates(newControlPlaneOn(t, Config{}, io.Discard, st))
}

// raceCreates races creates of cp's tenant for the last slots of its quota.
func raceCreates(cp *controlPlane) {
	t := cp.t
	admin := cp.adminKey()
	const limit, racers = 3, 10
	cp.setQuota(admin, fmt.Sprintf(`{"max_sandboxes": %d, "max_memory_mib": 0, "max_cpus": 0}`, limit))
	codes := make([]int, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = cp.do(cp.key, http.MethodPost, "/v1/sandboxes", `{"template": "minimal", "memory_mib": 128}`, nil)
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[http.StatusCreated] != limit || count[http.StatusTooManyRequests] != racers-limit {
		t.Errorf("%d racing creates with a quota of %d: %v; want %d created, %d refused", racers, limit, count, limit, racers-limit)
	}
	var list sandboxv1.SandboxList
	cp.do(cp.key, http.MethodGet, "/v1/sandboxes", "", &list)
	if len(list.Sandboxes) != limit {
		t.Errorf("%d sandboxes listed, want %d", len(list.Sandboxes), limit)
	}
}

// TestQuotaRefusesE2B checks that the E2B API's create and its resume of a
// hibernated sandbox are admitted under the quota like SPACE's own.
func TestQuotaRefusesE2B(t *testing.T) {
	cp := newControlPlane(t, Config{})
	cp.create(`{"template": "minimal", "memory_mib": 256}`)
	hibernated := cp.storeStopped(sandbox.StateHibernated)
	cp.setQuota(cp.adminKey(), `{"max_sandboxes": 1, "max_memory_mib": 0, "max_cpus": 0}`)
	for _, tc := range []struct{ what, path, body string }{
		{"E2B create", E2BPathPrefix + "/sandboxes", `{"templateID": "minimal"}`},
		{"E2B connect to a hibernated sandbox", E2BPathPrefix + "/sandboxes/" + hibernated.ID + "/connect", `{"timeout": 60}`},
	} {
		// E2B bodies carry the status as their code; the message is SPACE's.
		code, _ := cp.do(cp.key, http.MethodPost, tc.path, tc.body, nil)
		if code != http.StatusTooManyRequests {
			t.Errorf("%s over quota: HTTP %d, want 429", tc.what, code)
		}
	}
}
