package server

import (
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/apikey"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store/readcache"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// newCachedControlPlane is newControlPlane on SQLite behind the read cache,
// as `space server` runs it.
func newCachedControlPlane(t *testing.T) (*controlPlane, *readcache.Store) {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	cached := readcache.New(st, readcache.DefaultSize)
	return newControlPlaneOn(t, Config{}, io.Discard, cached), cached
}

// TestCachedKeyRevokedIsRefusedOnTheNextRequest: a key the cache holds is
// refused on the request right after its revocation, whether it revoked
// itself through the API or was revoked in the store.
func TestCachedKeyRevokedIsRefusedOnTheNextRequest(t *testing.T) {
	cp, cached := newCachedControlPlane(t)
	for _, how := range []string{"api", "store"} {
		t.Run(how, func(t *testing.T) {
			cp := cp.with(t)
			_, raw, err := service.MintKey(t.Context(), cp.st, cp.tenant, false)
			if err != nil {
				t.Fatal(err)
			}
			key, err := apikey.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if code, e := cp.do(raw, http.MethodGet, "/v1/sandboxes", "", nil); code != http.StatusOK {
					t.Fatalf("list with the new key: HTTP %d %+v", code, e)
				}
			}
			if n, _ := cached.Len(); n == 0 {
				t.Fatal("no key cached after two requests: the test would not test the cache")
			}
			switch how {
			case "api":
				if code, e := cp.do(raw, http.MethodDelete, "/v1/keys/"+key.ID, "", nil); code >= 300 {
					t.Fatalf("revoke: HTTP %d %+v", code, e)
				}
			case "store":
				if err := cp.st.RevokeAPIKey(t.Context(), key.ID, time.Now().UTC()); err != nil {
					t.Fatal(err)
				}
			}
			if code, _ := cp.do(raw, http.MethodGet, "/v1/sandboxes", "", nil); code != http.StatusUnauthorized {
				t.Errorf("the request right after the revocation: HTTP %d, want 401", code)
			}
		})
	}
}

// TestCachedSandboxMovedOrDeletedIsNotServed: a sandbox the cache holds is
// read again on the request right after a write moved it to another node,
// and is not found right after its row is deleted.
func TestCachedSandboxMovedOrDeletedIsNotServed(t *testing.T) {
	cp, cached := newCachedControlPlane(t)
	ctx := t.Context()
	sb := cp.create(`{"template":"minimal","cpus":1,"memory_mib":256}`)
	var got sandboxv1.Sandbox
	for range 2 {
		if code, e := cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+sb.ID, "", &got); code != http.StatusOK {
			t.Fatalf("get: HTTP %d %+v", code, e)
		}
	}
	if _, n := cached.Len(); n == 0 {
		t.Fatal("no sandbox cached after two requests: the test would not test the cache")
	}
	row, err := cp.st.GetSandboxByID(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	row.Node = "n-elsewhere"
	if err := cp.st.UpdateSandbox(ctx, row); err != nil {
		t.Fatal(err)
	}
	if code, e := cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+sb.ID, "", &got); code != http.StatusOK || got.Node != "n-elsewhere" {
		t.Errorf("get right after the move: HTTP %d %+v, node %q; want node n-elsewhere", code, e, got.Node)
	}
	if err := cp.st.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if code, _ := cp.do(cp.key, http.MethodGet, "/v1/sandboxes/"+sb.ID, "", &got); code != http.StatusNotFound {
		t.Errorf("get right after the delete: HTTP %d (node %q), want 404", code, got.Node)
	}
}
