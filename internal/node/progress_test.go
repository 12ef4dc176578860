package node

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/nodeclient"
	"github.com/spacesandbox/space/internal/progress"
)

// TestServeLongStreamsToTheClient runs serveLong behind the node-api routes
// of a long operation and calls them with nodeclient: readings then the
// answer when asked for, an error with its class, and the plain answer for
// a caller that does not ask.
func TestServeLongStreamsToTheClient(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /node/v1/snapshots/{id}/upload", func(w http.ResponseWriter, r *http.Request) {
		serveLong(w, r, func(report Reporter) (any, error) {
			if r.PathValue("id") == "broken" {
				return nil, fmt.Errorf("%w: object store refused", errdefs.ErrFailedPrecondition)
			}
			if report != nil {
				for _, done := range []int64{0, 512, 1024} {
					report(progress.Report{Phase: "upload", Unit: progress.UnitBytes, Done: done, Total: 1024, Final: done == 1024})
				}
			}
			return nodev1.Artifacts{PlainBytes: 1024}, nil
		})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c, err := nodeclient.New(strings.TrimPrefix(srv.URL, "http://"), "token")
	if err != nil {
		t.Fatal(err)
	}

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

	// A caller that does not ask gets the plain JSON answer.
	if arts, err := c.Upload(t.Context(), "snap", nodev1.UploadSnapshot{}); err != nil || arts.PlainBytes != 1024 {
		t.Errorf("Upload = %+v, %v; want the plain answer", arts, err)
	}
}

// TestStreamedClientReadsAPlainNode: a node that does not stream (an older
// one) answers JSON, which the streaming client reads as it is.
func TestStreamedClientReadsAPlainNode(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, nodev1.TemplateReady{Name: "t", SizeBytes: 7})
	}))
	defer srv.Close()
	c, err := nodeclient.New(strings.TrimPrefix(srv.URL, "http://"), "token")
	if err != nil {
		t.Fatal(err)
	}
	ready, err := c.EnsureTemplateProgress(t.Context(), "t", "dir:/x", func(nodev1.Progress) { t.Error("a reading from a plain answer") })
	if err != nil || ready.SizeBytes != 7 {
		t.Errorf("EnsureTemplateProgress = %+v, %v; want size 7", ready, err)
	}
}
