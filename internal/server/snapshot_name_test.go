package server

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// TestSnapshotNameOnCreate: POST /v1/sandboxes/{id}/snapshots with a name
// names the snapshot, and the sandbox's snapshot list shows it; a name of
// the wrong shape or a template's is refused before any snapshot is taken;
// another tenant's snapshot of the same name is its own and leaves mine
// named (the Dockerfile step cache relies on names being per tenant).
func TestSnapshotNameOnCreate(t *testing.T) {
	cp := newControlPlane(t, Config{})
	sb := cp.create(`{"template": "minimal", "memory_mib": 256}`)
	count := func(id, tenant string) int {
		t.Helper()
		all, err := cp.st.ListSnapshots(t.Context(), store.SnapshotFilter{SandboxID: id, Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		return len(all)
	}
	// A ready snapshot under key k1's id, so the request answers at once
	// whatever the fake node does.
	ready := func(id, tenant, key string) {
		t.Helper()
		s := store.Snapshot{ID: service.KeyedSnapshotID(tenant, id, key), SandboxID: id, Tenant: tenant,
			Kind: store.SnapshotDisk, Tier: service.TierManual, State: store.SnapshotReady, Node: "n1", Runtime: "ns",
			Template: "minimal", CPUs: 1, MemoryMiB: 256, Generation: 1, CreatedAt: time.Now().UTC()}
		if err := cp.st.CreateSnapshot(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	ready(sb.ID, cp.tenant, "k1")
	code, snap := cp.snapshotWithKey(sb.ID, "k1", `{"name": "dfc-step"}`)
	if code != http.StatusCreated || !slices.Equal(snap.Names, []string{"dfc-step"}) {
		t.Fatalf("named snapshot: HTTP %d names %v; want 201 and [dfc-step]", code, snap.Names)
	}
	names := func(key, id string) []string {
		t.Helper()
		var list sandboxv1.SnapshotList
		if code, e := cp.do(key, http.MethodGet, "/v1/sandboxes/"+id+"/snapshots", "", &list); code != http.StatusOK {
			t.Fatalf("list snapshots: HTTP %d %+v", code, e)
		}
		var out []string
		for _, s := range list.Snapshots {
			out = append(out, s.Names...)
		}
		return out
	}
	if got := names(cp.key, sb.ID); !slices.Equal(got, []string{"dfc-step"}) {
		t.Errorf("listed names %v, want [dfc-step]", got)
	}

	before := count(sb.ID, cp.tenant)
	for body, want := range map[string]int{
		`{"name": "Not A Name"}`: http.StatusBadRequest,
		`{"name": "minimal"}`:    http.StatusConflict,
	} {
		if code, _ := cp.do(cp.key, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/snapshots", body, nil); code != want {
			t.Errorf("snapshot %s: HTTP %d, want %d", body, code, want)
		}
	}
	if after := count(sb.ID, cp.tenant); after != before {
		t.Errorf("a refused name took a snapshot: %d snapshots, were %d", after, before)
	}

	var theirs sandboxv1.Sandbox
	if code, e := cp.do(cp.other, http.MethodPost, "/v1/sandboxes", `{"template": "minimal", "memory_mib": 256}`, &theirs); code != http.StatusCreated {
		t.Fatalf("other tenant create: HTTP %d %+v", code, e)
	}
	otherTenant := theirs.Tenant
	ready(theirs.ID, otherTenant, "k9")
	req, _ := http.NewRequest(http.MethodPost, cp.url+"/v1/sandboxes/"+theirs.ID+"/snapshots", strings.NewReader(`{"name": "dfc-step"}`))
	req.Header.Set("Authorization", "Bearer "+cp.other)
	req.Header.Set("Idempotency-Key", "k9")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("other tenant names its snapshot dfc-step: HTTP %d, want 201", resp.StatusCode)
	}
	if got := names(cp.key, sb.ID); !slices.Equal(got, []string{"dfc-step"}) {
		t.Errorf("after another tenant named its snapshot dfc-step, mine are named %v, want [dfc-step]", got)
	}
	if got := names(cp.other, theirs.ID); !slices.Equal(got, []string{"dfc-step"}) {
		t.Errorf("the other tenant's names %v, want [dfc-step]", got)
	}
}
