package nodefacing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/connecterr"
	"github.com/spacesandbox/space/internal/errdefs"
)

// fakeControlPlane accepts the join token "join" and node n1's credential
// "cred-n1", counts the calls that got through, and answers them.
type fakeControlPlane struct {
	heartbeats, resolves atomic.Int32
	resolveErr           error
}

func (f *fakeControlPlane) CheckJoinToken(bearer string) error {
	if bearer != "join" {
		return fmt.Errorf("%w: join token required", errdefs.ErrUnauthenticated)
	}
	return nil
}

func (f *fakeControlPlane) CheckNodeCredential(nodeID, bearer string) error {
	if nodeID != "n1" || bearer != "cred-n1" {
		return fmt.Errorf("%w: node %s: send its own credential", errdefs.ErrUnauthenticated, nodeID)
	}
	return nil
}

func (f *fakeControlPlane) NodeHeartbeat(_ context.Context, from Origin, hb *nodeapiv1.Heartbeat) (*nodeapiv1.HeartbeatReply, error) {
	f.heartbeats.Add(1)
	if from.Remote == "" || from.Host == "" {
		return nil, fmt.Errorf("%w: origin %+v lacks the remote address or the host", errdefs.ErrInvalidArgument, from)
	}
	return &nodeapiv1.HeartbeatReply{NodeCredential: "cred-" + hb.GetNodeId()}, nil
}

func (f *fakeControlPlane) ResolveNodeCredential(_ context.Context, nodeID string, req nodev1.ResolveCredential) (*nodev1.ResolvedCredential, error) {
	f.resolves.Add(1)
	if f.resolveErr != nil {
		return nil, f.resolveErr
	}
	return &nodev1.ResolvedCredential{Applies: true, ID: "c1", Secret: []byte("s3cret")}, nil
}

func serve(t *testing.T, cp ControlPlane) string {
	t.Helper()
	h := New(cp, slog.New(slog.NewTextHandler(io.Discard, nil)))
	mux := http.NewServeMux()
	mux.Handle("POST "+Path, h)
	mux.HandleFunc("POST /internal/v1/nodes/{id}/heartbeat", h.V1Heartbeat)
	mux.HandleFunc("POST /internal/v1/nodes/{node}/credentials/resolve", h.V1ResolveCredential)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestCallsNeedTheirToken: a heartbeat needs the join token and a
// resolution the node's own credential; a call without, or with the other
// one, is refused as Unauthenticated before it reaches the control plane.
func TestCallsNeedTheirToken(t *testing.T) {
	cp := &fakeControlPlane{}
	c := nodeapiv1connect.NewControlPlaneServiceClient(http.DefaultClient, serve(t, cp))
	heartbeat := func(bearer string) (*nodeapiv1.HeartbeatReply, error) {
		req := connect.NewRequest(&nodeapiv1.Heartbeat{NodeId: "n1", Address: "127.0.0.1:9", Token: "t"})
		if bearer != "" {
			req.Header().Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.Heartbeat(t.Context(), req)
		if err != nil {
			return nil, connecterr.Decode(err)
		}
		return resp.Msg, nil
	}
	resolve := func(bearer string) error {
		req := connect.NewRequest(&nodeapiv1.ResolveCredentialRequest{NodeId: "n1", SandboxId: "s", ExecId: "e", Host: "h"})
		if bearer != "" {
			req.Header().Set("Authorization", "Bearer "+bearer)
		}
		_, err := c.ResolveCredential(t.Context(), req)
		return connecterr.Decode(err)
	}
	for _, bearer := range []string{"", "wrong", "cred-n1"} {
		if _, err := heartbeat(bearer); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("heartbeat with %q: %v, want Unauthenticated", bearer, err)
		}
	}
	for _, bearer := range []string{"", "wrong", "join"} {
		if err := resolve(bearer); !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("resolve with %q: %v, want Unauthenticated", bearer, err)
		}
	}
	if n, m := cp.heartbeats.Load(), cp.resolves.Load(); n != 0 || m != 0 {
		t.Fatalf("%d heartbeats and %d resolutions reached the control plane unauthenticated", n, m)
	}
	if reply, err := heartbeat("join"); err != nil || reply.GetNodeCredential() != "cred-n1" {
		t.Errorf("heartbeat with the join token = %v, %v", reply, err)
	}
	if err := resolve("cred-n1"); err != nil {
		t.Errorf("resolve with the node's credential: %v", err)
	}
	// The control plane's error crosses with its class and reason.
	cp.resolveErr = fmt.Errorf("credential c1: %w", errdefs.ErrRateLimited)
	if err := resolve("cred-n1"); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Errorf("rate-limited resolve: %v, want rate_limited", err)
	}
	// An error of no class keeps its text in the log.
	cp.resolveErr = errors.New("disk on fire at /var/lib/space")
	if err := resolve("cred-n1"); err == nil || strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("internal error: %v, want one without its cause", err)
	}
}

// TestOlderNodeIsRefusedWithAnUpgradeMessage: a node of the previous
// version (node API v1: JSON heartbeats) is refused at registration with a
// message saying to upgrade it, and never registered; without the join
// token it is refused as any unauthenticated request.
func TestOlderNodeIsRefusedWithAnUpgradeMessage(t *testing.T) {
	cp := &fakeControlPlane{}
	url := serve(t, cp)
	post := func(path, bearer string) (int, nodev1.Error) {
		body, _ := json.Marshal(map[string]any{"address": "127.0.0.1:9", "token": "t", "runtimes": []string{"ns"}, "sandbox_id": "s"})
		req, _ := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+bearer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e nodev1.Error
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatalf("%s: answer is not a v1 error body: %v", path, err)
		}
		return resp.StatusCode, e
	}
	code, e := post("/internal/v1/nodes/n1/heartbeat", "join")
	if code != http.StatusPreconditionFailed || e.Code != "failed_precondition" || !strings.Contains(e.Message, "upgrade the node") || !strings.Contains(e.Message, "n1") {
		t.Errorf("v1 heartbeat: HTTP %d %+v, want 412 saying to upgrade node n1", code, e)
	}
	code, e = post("/internal/v1/nodes/n1/credentials/resolve", "cred-n1")
	if code != http.StatusPreconditionFailed || !strings.Contains(e.Message, "upgrade the node") {
		t.Errorf("v1 resolve: HTTP %d %+v, want 412 saying to upgrade the node", code, e)
	}
	if code, _ := post("/internal/v1/nodes/n1/heartbeat", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("v1 heartbeat without the join token: HTTP %d, want 401", code)
	}
	if n := cp.heartbeats.Load(); n != 0 {
		t.Errorf("%d v1 heartbeats registered a node", n)
	}
}
