package nodeclient

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	nodeapi "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
)

// infoNode is a node-api with the Connect handler's default options (gzip
// offered, any size compressed) answering Info with an InfoResponse of
// about 2 KiB, and recording each request's Accept-Encoding and the
// Content-Encoding of each answer.
type infoNode struct {
	nodeapiv1connect.UnimplementedNodeServiceHandler
	mu       sync.Mutex
	accepted []string
	encoded  []string
}

func (n *infoNode) Info(context.Context, *connect.Request[nodeapi.InfoRequest]) (*connect.Response[nodeapi.InfoResponse], error) {
	return connect.NewResponse(&nodeapi.InfoResponse{NodeId: "n1", Runtimes: strings.Split(strings.Repeat("ns,vm,", 200), ",")}), nil
}

func (n *infoNode) start(t testing.TB) *httptest.Server {
	_, h := nodeapiv1connect.NewNodeServiceHandler(n)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		n.mu.Lock()
		n.accepted = append(n.accepted, r.Header.Get("Accept-Encoding"))
		n.encoded = append(n.encoded, w.Header().Get("Content-Encoding"))
		n.mu.Unlock()
	}))
	t.Cleanup(ts.Close)
	return ts
}

// TestUnaryCallsAreNotCompressed: the node answers a unary call of this
// client uncompressed. The client offers no gzip to Connect, but Go's HTTP
// transport asks for gzip on its own unless told not to, and a Connect
// handler then compresses every unary answer, however small (a compressor's
// reset clears some 600 KiB of tables: the flate writers were the largest
// allocation in the server's heap profile of 20 creates).
func TestUnaryCallsAreNotCompressed(t *testing.T) {
	n := &infoNode{}
	ts := n.start(t)
	c, err := New(strings.TrimPrefix(ts.URL, "http://"), "tok")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.NodeID != "n1" {
		t.Fatalf("Info answered node %q, want n1", info.NodeID)
	}
	ts.Close() // waits for the handler, which records after answering
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.accepted) != 1 || strings.Contains(n.accepted[0], "gzip") || n.encoded[0] != "" {
		t.Errorf("Info asked with Accept-Encoding %q and was answered with Content-Encoding %q; want no gzip either way", n.accepted, n.encoded)
	}
}

// BenchmarkUnaryCall is one Info round trip to a node-api over loopback
// TCP, answer included (about 2 KiB).
func BenchmarkUnaryCall(b *testing.B) {
	n := &infoNode{}
	ts := n.start(b)
	c, err := New(strings.TrimPrefix(ts.URL, "http://"), "tok")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Info(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
