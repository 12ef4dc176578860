package nodeclient

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// TestStreamGivesUpOnASilentNode: a node that starts a streamed answer and
// then sends nothing is given up after streamIdle, as Unavailable (the
// caller retries), while one that keeps sending readings is not.
func TestStreamGivesUpOnASilentNode(t *testing.T) {
	old := streamIdle
	streamIdle = time.Second
	t.Cleanup(func() { streamIdle = old })
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", nodev1.ProgressContentType)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if r.URL.Path == "/node/v1/snapshots/busy/upload" {
			// Readings for twice streamIdle, then the answer.
			for range 8 {
				w.Write([]byte(`{"progress":{"phase":"upload","done":1}}` + "\n"))
				w.(http.Flusher).Flush()
				time.Sleep(streamIdle / 4) // a wide margin under the limit
			}
			w.Write([]byte(`{"result":{"plain_bytes":5}}` + "\n"))
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := New(strings.TrimPrefix(srv.URL, "http://"), "token")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.UploadProgress(t.Context(), "silent", nodev1.UploadSnapshot{}, nil)
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "no answer or reading") {
		t.Errorf("silent node: %v, want Unavailable naming the silence", err)
	}
	arts, err := c.UploadProgress(t.Context(), "busy", nodev1.UploadSnapshot{}, nil)
	if err != nil || arts.PlainBytes != 5 {
		t.Errorf("busy node: %+v, %v; want its answer", arts, err)
	}
}
