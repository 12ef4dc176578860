package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/privop"
)

// refusingNodeManager serves the node-manager protocol on a unix socket in
// dir, refusing every start with refusal and answering anything else
// (the teardown after a failed start) with success.
func refusingNodeManager(t *testing.T, dir string, refusal error) string {
	t.Helper()
	sock := filepath.Join(dir, "nm.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			var req privop.Request
			if _, err := privop.ReadMessage(c, &req); err == nil {
				resp := privop.Response{}
				if req.Op == privop.OpStart {
					resp = privop.ErrorResponse(fmt.Errorf("start %s: %w", req.Start.ExecID, refusal))
				}
				_ = privop.WriteMessage(c, resp)
			}
			c.Close()
		}
	}()
	return sock
}

// TestRefusalsKeepTheirClassToTheControlPlane: a start the node-manager
// refuses reaches the control plane's client of the node (nodeclient) with
// the class and reason it had at the node-manager, across the privileged
// protocol and the node-api: a node with no room is ResourceExhausted (not
// Unavailable), a missing template is ErrTemplateMissing.
func TestRefusalsKeepTheirClassToTheControlPlane(t *testing.T) {
	for _, tc := range []struct {
		refusal error
		class   error
	}{
		{fmt.Errorf("ns: all 64 uid ranges are in use: %w", errdefs.ErrNoCapacity), errdefs.ErrResourceExhausted},
		{fmt.Errorf("ns: too many of something: %w", errdefs.ErrResourceExhausted), errdefs.ErrResourceExhausted},
		{fmt.Errorf("%w: template %q is not on this node", errdefs.ErrTemplateMissing, "base"), errdefs.ErrFailedPrecondition},
		{fmt.Errorf("%w: snapshot s1 is not on this node", errdefs.ErrFailedPrecondition), errdefs.ErrFailedPrecondition},
	} {
		t.Run(tc.refusal.Error(), func(t *testing.T) {
			dir := t.TempDir()
			sock := refusingNodeManager(t, dir, tc.refusal)
			m, err := NewManager(Config{NodeID: "node-a", DataDir: filepath.Join(dir, "data"), Privileged: privop.NewClient(sock),
				HostBridge: "/bin/true", Token: "node-token"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(m.Handler())
			defer srv.Close()
			c, err := nodeclient.New(strings.TrimPrefix(srv.URL, "http://"), "node-token")
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Start(context.Background(), nodev1.StartExecution{ExecID: "sb1-g1-x", SandboxID: "sb1", Generation: 1,
				ActivationID: "a-1", Template: "base", Runtime: "ns", CPUs: 1, MemoryMiB: 256})
			if err == nil {
				t.Fatal("start succeeded; want the node-manager's refusal")
			}
			if got := errdefs.ClassOf(err); got != tc.class {
				t.Errorf("start: %v: class %v, want %v", err, got, tc.class)
			}
			if got, want := errdefs.ReasonOf(err), errdefs.ReasonOf(tc.refusal); got != want {
				t.Errorf("start: %v: reason %q, want %q", err, got, want)
			}
			if errdefs.IsUnavailable(err) {
				t.Errorf("start: %v is Unavailable", err)
			}
			if want := errdefs.ReasonOf(tc.refusal); want != "" && !errors.Is(err, errdefs.ReasonError(want)) {
				t.Errorf("start: %v does not match the reason's sentinel", err)
			}
		})
	}
}
