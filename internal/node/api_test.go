package node

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/privop"
)

// TestConnectRoutesNeedTheNodeToken: the node API's Connect services refuse
// a call without the node token or with another one, as Unauthenticated,
// and serve one with it; a node error crosses with its class.
func TestConnectRoutesNeedTheNodeToken(t *testing.T) {
	m, err := NewManager(Config{NodeID: "node-a", DataDir: t.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true",
		Token: "node-token"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(m.Handler())
	t.Cleanup(api.Close)
	addr := strings.TrimPrefix(api.URL, "http://")

	for _, token := range []string{"", "another-token"} {
		c, err := nodeclient.New(addr, token)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.List(t.Context()); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("List with token %q: %v, want Unauthenticated", token, err)
		}
		if err := c.Stop(t.Context(), "sb1-g1-x"); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("Stop with token %q: %v, want Unauthenticated", token, err)
		}
		// The streamed calls too.
		if _, err := c.Upload(t.Context(), "snap", nodev1UploadForTest()); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("Upload with token %q: %v, want Unauthenticated", token, err)
		}
	}

	c, err := nodeclient.New(addr, "node-token")
	if err != nil {
		t.Fatal(err)
	}
	if execs, err := c.List(t.Context()); err != nil || len(execs) != 0 {
		t.Errorf("List with the token = %v, %v; want none", execs, err)
	}
	if _, err := c.Get(t.Context(), "sb1-g1-x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get of an unknown execution: %v, want NotFound", err)
	}

	// The plain HTTP routes keep their JSON refusal.
	req, _ := http.NewRequest(http.MethodGet, api.URL+"/node/v1/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /node/v1/metrics without the token: HTTP %d, want 401", resp.StatusCode)
	}
}

func nodev1UploadForTest() nodev1.UploadSnapshot {
	return nodev1.UploadSnapshot{Tenant: "t1", Prefix: "tenants/t1/snapshots/snap/", SharedPrefix: "tenants/t1/shared/", KeyID: "k1"}
}
