package nodeclient

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/api/node/v1/nodeapi/nodeapiv1connect"
	"github.com/spacesandbox/space/internal/connecterr"
	"github.com/spacesandbox/space/internal/errdefs"
)

// fakeSnapshots streams what each snapshot id asks for: "busy" readings for
// twice streamIdle then the artifacts, "silent" nothing, "broken" an error,
// anything else three readings and the artifacts.
type fakeSnapshots struct {
	nodeapiv1connect.UnimplementedSnapshotServiceHandler
}

func (fakeSnapshots) Upload(ctx context.Context, req *connect.Request[nodeapiv1.UploadSnapshotRequest], st *connect.ServerStream[nodeapiv1.UploadSnapshotResponse]) error {
	reading := func(done int64, final bool) error {
		return st.Send(&nodeapiv1.UploadSnapshotResponse{Event: &nodeapiv1.UploadSnapshotResponse_Progress{
			Progress: &nodeapiv1.Progress{Phase: "upload", Unit: "bytes", Done: done, Total: 1024, Final: final}}})
	}
	switch req.Msg.GetSnapshotId() {
	case "silent":
		<-ctx.Done()
		return ctx.Err()
	case "broken":
		return fmt.Errorf("%w: object store refused", errdefs.ErrFailedPrecondition)
	case "cut":
		// The node dies mid-answer: its connection is cut after a
		// reading, with no end of stream.
		if err := reading(0, false); err != nil {
			return err
		}
		panic(http.ErrAbortHandler)
	case "busy":
		for range 8 {
			if err := reading(1, false); err != nil {
				return err
			}
			time.Sleep(streamIdle / 4) // a wide margin under the limit
		}
	default:
		for _, done := range []int64{0, 512, 1024} {
			if err := reading(done, done == 1024); err != nil {
				return err
			}
		}
	}
	return st.Send(&nodeapiv1.UploadSnapshotResponse{Event: &nodeapiv1.UploadSnapshotResponse_Artifacts{Artifacts: &nodeapiv1.Artifacts{PlainBytes: 1024}}})
}

func newFakeNode(t *testing.T) *Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(nodeapiv1connect.NewSnapshotServiceHandler(fakeSnapshots{}, connect.WithInterceptors(connecterr.Interceptor())))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(nodev1.VersionHeader, nodev1.Version)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(strings.TrimPrefix(srv.URL, "http://"), "token")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStreamedCallsGiveReadingsThenTheAnswer: readings then the answer when
// asked for, an error with its class, and only the answer for a caller that
// does not ask.
func TestStreamedCallsGiveReadingsThenTheAnswer(t *testing.T) {
	c := newFakeNode(t)
	var got []nodev1.Progress
	arts, err := c.UploadProgress(t.Context(), "snap", nodev1.UploadSnapshot{}, func(p nodev1.Progress) { got = append(got, p) })
	if err != nil || arts.PlainBytes != 1024 {
		t.Fatalf("UploadProgress = %+v, %v; want 1024 plain bytes", arts, err)
	}
	if len(got) != 3 || got[1].Done != 512 || !got[2].Final {
		t.Errorf("readings = %+v, want 0, 512, then 1024 final", got)
	}
	_, err = c.UploadProgress(t.Context(), "broken", nodev1.UploadSnapshot{}, nil)
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "object store refused") {
		t.Errorf("streamed error = %v, want the failed-precondition cause", err)
	}
	if arts, err := c.Upload(t.Context(), "snap", nodev1.UploadSnapshot{}); err != nil || arts.PlainBytes != 1024 {
		t.Errorf("Upload = %+v, %v; want the answer", arts, err)
	}
}

// TestStreamGivesUpOnASilentNode: a node that starts a streamed answer and
// then sends nothing is given up after streamIdle, as Unavailable (the
// caller retries), while one that keeps sending readings is not.
func TestStreamGivesUpOnASilentNode(t *testing.T) {
	old := streamIdle
	streamIdle = time.Second
	t.Cleanup(func() { streamIdle = old })
	c := newFakeNode(t)
	_, err := c.UploadProgress(t.Context(), "silent", nodev1.UploadSnapshot{}, nil)
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "no answer or reading") {
		t.Errorf("silent node: %v, want Unavailable naming the silence", err)
	}
	arts, err := c.UploadProgress(t.Context(), "busy", nodev1.UploadSnapshot{}, nil)
	if err != nil || arts.PlainBytes != 1024 {
		t.Errorf("busy node: %+v, %v; want its answer", arts, err)
	}
}

// TestACutStreamIsUnavailable: a node whose streamed answer is cut
// before its end (the node process killed mid-upload) gives Unavailable,
// so the caller retries (a hibernation is redone once the node is back),
// not an error of no class that gives the operation up.
func TestACutStreamIsUnavailable(t *testing.T) {
	c := newFakeNode(t)
	_, err := c.UploadProgress(t.Context(), "cut", nodev1.UploadSnapshot{}, nil)
	if !errdefs.IsUnavailable(err) {
		t.Errorf("stream cut by the node's death: %v, want Unavailable", err)
	}
}

// TestAnOlderNodeIsNamed: a node that answers the Connect routes 404 (it
// serves the JSON routes of node API v1) is refused as FailedPrecondition
// saying to upgrade it, not as a bare 404.
func TestAnOlderNodeIsNamed(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /node/v1/executions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"executions":[]}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := New(strings.TrimPrefix(srv.URL, "http://"), "token")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.List(t.Context())
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "upgrade the node") {
		t.Errorf("List on a v1 node: %v, want FailedPrecondition saying to upgrade the node", err)
	}
}
