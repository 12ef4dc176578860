package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// snapshotWithKey posts a snapshot request for sandbox id with an
// Idempotency-Key and returns the HTTP status and the snapshot answered.
func (cp *controlPlane) snapshotWithKey(id, key, body string) (int, sandboxv1.Snapshot) {
	cp.t.Helper()
	req, err := http.NewRequest(http.MethodPost, cp.url+"/v1/sandboxes/"+id+"/snapshots", strings.NewReader(body))
	if err != nil {
		cp.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cp.key)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cp.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out sandboxv1.Snapshot
	if resp.StatusCode < 300 {
		if err := json.Unmarshal(b, &out); err != nil {
			cp.t.Fatalf("snapshot answer %s: %v", b, err)
		}
	}
	return resp.StatusCode, out
}

// TestSnapshotIdempotencyKey: a snapshot request with an Idempotency-Key
// takes the snapshot whose id is derived from the sandbox and the key, so
// a retry whose first attempt recorded the snapshot and never answered (the
// server died; or the connection was reset and Go's HTTP client re-sent the
// POST, which it does for one that carries an Idempotency-Key) answers that
// snapshot instead of taking a second one.
func TestSnapshotIdempotencyKey(t *testing.T) {
	cp := newControlPlane(t, Config{})
	sb := cp.create(`{"template": "minimal", "memory_mib": 256}`)
	snaps := func() []store.Snapshot {
		t.Helper()
		all, err := cp.st.ListSnapshots(t.Context(), store.SnapshotFilter{SandboxID: sb.ID, Tenant: cp.tenant})
		if err != nil {
			t.Fatal(err)
		}
		return all
	}

	// The first attempt of key k1 recorded its snapshot, which was taken,
	// and its answer was lost.
	recorded := store.Snapshot{ID: service.KeyedSnapshotID(cp.tenant, sb.ID, "k1"), SandboxID: sb.ID, Tenant: cp.tenant,
		Kind: store.SnapshotDisk, Tier: service.TierManual, State: store.SnapshotReady, Node: sb.Node, Runtime: "ns",
		Template: "minimal", CPUs: 1, MemoryMiB: 256, Generation: 1, CreatedAt: time.Now().UTC()}
	if err := cp.st.CreateSnapshot(t.Context(), recorded); err != nil {
		t.Fatal(err)
	}
	before := len(snaps())
	code, again := cp.snapshotWithKey(sb.ID, "k1", "")
	if code != http.StatusCreated || again.ID != recorded.ID {
		t.Fatalf("retried snapshot: HTTP %d id %q; want 201 with the recorded snapshot %s", code, again.ID, recorded.ID)
	}
	if after := len(snaps()); after != before {
		t.Errorf("the retried snapshot request took another snapshot: %d snapshots, were %d", after, before)
	}
	// The same key for another kind is refused.
	if code, _ := cp.snapshotWithKey(sb.ID, "k1", `{"kind": "full"}`); code != http.StatusConflict {
		t.Errorf("the key of another snapshot request: HTTP %d, want 409", code)
	}
	// A new key records its snapshot under the derived id (whatever the
	// fake node makes of it).
	cp.snapshotWithKey(sb.ID, "k2", "")
	if _, err := cp.st.GetSnapshot(t.Context(), cp.tenant, service.KeyedSnapshotID(cp.tenant, sb.ID, "k2")); err != nil {
		t.Errorf("snapshot with key k2: no snapshot under the derived id: %v", err)
	}
}
