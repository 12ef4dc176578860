package node

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
)

// TestHeartbeatRepliesAreNotCompressed: a heartbeat asks for no gzip and
// its reply comes uncompressed, from a control-plane handler with Connect's
// defaults (gzip offered, any size compressed). Without the transport's
// DisableCompression, Go's transport asks for gzip on the unary call that
// Connect left without an Accept-Encoding.
func TestHeartbeatRepliesAreNotCompressed(t *testing.T) {
	f := &fakeControlPlane{heartbeat: func(string, *nodeapiv1.Heartbeat) (*nodeapiv1.HeartbeatReply, error) {
		return &nodeapiv1.HeartbeatReply{}, nil
	}}
	_, h := nodeapiv1connect.NewControlPlaneServiceHandler(f)
	var accepted, encoded []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		accepted = append(accepted, r.Header.Get("Accept-Encoding"))
		encoded = append(encoded, w.Header().Get("Content-Encoding"))
	}))
	defer srv.Close()
	if _, err := heartbeatClient(srv.URL+"/").Heartbeat(context.Background(), connect.NewRequest(&nodeapiv1.Heartbeat{NodeId: "n1"})); err != nil {
		t.Fatal(err)
	}
	srv.Close() // waits for the handler, which records after answering
	if len(accepted) != 1 || accepted[0] != "" || encoded[0] != "" {
		t.Errorf("the heartbeat asked with Accept-Encoding %q and was answered with Content-Encoding %q; want neither", accepted, encoded)
	}
}
