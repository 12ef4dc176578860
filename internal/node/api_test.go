package node

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
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

// TestListSandboxReportsOnlyThatSandbox: a List filtered by sandbox (what a
// delete or a rollback asks for the executions it replaces) answers that
// sandbox's executions, every generation of them, and no other sandbox's
// or the warm pool's; unfiltered, every sandbox's.
func TestListSandboxReportsOnlyThatSandbox(t *testing.T) {
	m, err := NewManager(Config{NodeID: "node-a", DataDir: t.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true",
		Token: "node-token"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []*Record{
		{StartExecution: nodev1.StartExecution{ExecID: "sb1-g1-a", SandboxID: "sb1", Generation: 1, Runtime: "ns"}, Retired: true, RetiredBy: 2},
		{StartExecution: nodev1.StartExecution{ExecID: "sb1-g2-b", SandboxID: "sb1", Generation: 2, Runtime: "ns"}},
		{StartExecution: nodev1.StartExecution{ExecID: "sb2-g1-c", SandboxID: "sb2", Generation: 1, Runtime: "ns"}},
		{StartExecution: nodev1.StartExecution{ExecID: "pool-x1", Runtime: "ns"}, Pool: true},
	} {
		saveRecord(t, m, rec)
	}
	api := httptest.NewServer(m.Handler())
	t.Cleanup(api.Close)
	c, err := nodeclient.New(strings.TrimPrefix(api.URL, "http://"), "node-token")
	if err != nil {
		t.Fatal(err)
	}
	ids := func(execs []nodev1.Execution) []string {
		var out []string
		for _, ex := range execs {
			out = append(out, ex.ExecID)
		}
		slices.Sort(out)
		return out
	}
	execs, err := c.ListSandbox(t.Context(), "sb1")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(execs), []string{"sb1-g1-a", "sb1-g2-b"}; !slices.Equal(got, want) {
		t.Errorf("ListSandbox(sb1) = %v, want %v", got, want)
	}
	// The node filters, not only the client: the wire answer holds sb1's.
	raw := nodeapiv1connect.NewExecutionServiceClient(http.DefaultClient, api.URL)
	req := connect.NewRequest(&nodeapiv1.ListExecutionsRequest{SandboxId: "sb1"})
	req.Header().Set("X-Space-Node-Token", "node-token")
	resp, err := raw.List(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(nodev1.ExecutionsFromWire(resp.Msg.GetExecutions())); !slices.Equal(got, []string{"sb1-g1-a", "sb1-g2-b"}) {
		t.Errorf("the node answers List(sandbox sb1) with %v", got)
	}
	if got := m.ListSandbox(t.Context(), ""); len(got) != 0 {
		t.Errorf("ListSandbox of no sandbox = %v, want none", ids(got))
	}
	all, err := c.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(all), []string{"sb1-g1-a", "sb1-g2-b", "sb2-g1-c"}; !slices.Equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
}
