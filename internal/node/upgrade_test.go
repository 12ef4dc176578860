package node

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/errdefs"
)

// oldControlPlane is a control plane of the previous version: it serves
// node API v1, JSON heartbeats and credential resolutions under
// /internal/v1/nodes/, and nothing of the Connect services.
func oldControlPlane(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /internal/v1/nodes/{id}/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"keys":null,"fence_after_ms":0,"internal":{"version":1,"cidrs":[]},"server_time":"2026-01-01T00:00:00Z"}`))
	})
	mux.HandleFunc("POST /internal/v1/nodes/{node}/credentials/resolve", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"applies":true}`))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"code":"not_found","message":"no route"}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestNodeRefusesAnOlderControlPlane: a node of this version reporting to a
// control plane of the previous one (which speaks node API v1) is refused
// at registration with an error that says what to do, for its heartbeat and
// for its gateway's credential resolution alike.
func TestNodeRefusesAnOlderControlPlane(t *testing.T) {
	url := oldControlPlane(t)
	client := nodeapiv1connect.NewControlPlaneServiceClient(http.DefaultClient, url)
	_, err := client.Heartbeat(t.Context(), connect.NewRequest(&nodeapiv1.Heartbeat{NodeId: "n1", Address: "127.0.0.1:9", Token: "t"}))
	if err == nil {
		t.Fatal("an old control plane answered a Connect heartbeat")
	}
	err = controlPlaneError(url, "heartbeat", err)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "upgrade the control plane first") || !strings.Contains(err.Error(), url) {
		t.Errorf("heartbeat to an old control plane: %v, want FailedPrecondition naming it and saying to upgrade it first", err)
	}

	c := &CredentialClient{Server: url, NodeID: "n1", Credential: func() string { return "cred" }}
	_, err = c.resolve(context.Background(), nodev1.ResolveCredential{SandboxID: "s", ExecID: "e", Host: "h", CheckOnly: true})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "upgrade the control plane first") {
		t.Errorf("resolve at an old control plane: %v, want FailedPrecondition saying to upgrade it first", err)
	}
}
