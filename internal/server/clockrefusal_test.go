package server

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/restapi"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

// TestNodeClockRefusalKeepsItsReason: a node that refuses every capability
// because its clock disagrees answers 503 clock_disagrees (the node column
// of the table); a guest request through it reaches the REST client as 503
// unavailable with the reason clock_disagrees and the node's message.
func TestNodeClockRefusalKeepsItsReason(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	keys := capability.KeySetFor(1, signer)

	const why = "node clock differs from the control plane's by +3600.0s"
	srvNode := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, code, reason := apierr.Encode(apierr.Node, fmt.Errorf("%w: %s", errdefs.ErrClockSkew, why))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(nodev1.Error{Code: code, Message: why, Reason: string(reason)})
	}))
	defer srvNode.Close()
	nodes := NewNodes()
	if err := nodes.Register("node-a", strings.TrimPrefix(srvNode.URL, "http://"), "tok"); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Signer: signer, Keys: keys}, st, nodes, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := Bootstrap(ctx, st, filepath.Join(t.TempDir(), "admin.key")); err != nil {
		t.Fatal(err)
	}
	tenants, _ := st.ListTenants(ctx)
	sb := sandbox.New(tenants[0].ID, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
	sb.State, sb.Node, sb.Generation = sandbox.StateRunning, "node-a", 1
	sb.ExecID = sandbox.NewExecID(sb.ID, 1)
	if err := st.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	g, err := s.guestFor(ctx, sb, capability.OpFiles)
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Files.ListDir(ctx, connect.NewRequest(&filesystemv1.ListDirRequest{Path: "/"}))
	if err == nil {
		t.Fatal("ListDir through a node whose clock disagrees succeeded")
	}
	err = restapi.GuestError("list", err)
	status, code, reason := answerOf(err)
	if status != http.StatusServiceUnavailable || code != "unavailable" || reason != "clock_disagrees" || !strings.Contains(err.Error(), why) {
		t.Errorf("answered %d %q reason %q (%v); want 503 unavailable, reason clock_disagrees, with the node's message", status, code, reason, err)
	}
}
