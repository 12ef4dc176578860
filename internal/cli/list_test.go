package cli

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// TestSandboxListFiltersAndFilesStat: `space sandbox list`'s filters reach
// the server as its query (paged), and `space files stat` asks the stat
// route and prints the entry.
func TestSandboxListFiltersAndFilesStat(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("state") != "running" || q.Get("template") != "code-interpreter" || q.Get("name") != "n1" ||
			!slices.Equal(q["metadata"], []string{"a=1", "team=x"}) || q.Get("limit") == "" {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, "query "+r.URL.RawQuery)
			return
		}
		list := sandboxv1.SandboxList{Sandboxes: []sandboxv1.Sandbox{{ID: "sb-p" + strings.TrimPrefix(q.Get("page_token"), "p") + "x", State: sandboxv1.StateRunning, Template: "code-interpreter"}}}
		if q.Get("page_token") == "" {
			list.NextPageToken = "p2"
		}
		writeJSONResp(w, 200, list)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/stat", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("path") != "/etc/hosts" {
			writeErr(w, 404, sandboxv1.CodeNotFound, "no such file "+r.URL.Query().Get("path"))
			return
		}
		writeJSONResp(w, 200, sandboxv1.FileEntry{Name: "hosts", Path: "/etc/hosts", Type: "file", Size: 42, Mode: 0o644, Owner: "root"})
	})
	fakeServer(t, mux)
	code, out, errOut := run(t, nil, "sandbox", "list", "--state", "running", "--template", "code-interpreter", "--name", "n1", "--metadata", "team=x", "--metadata", "a=1")
	if code != 0 || !strings.Contains(out, "sb-px") || !strings.Contains(out, "sb-p2x") {
		t.Errorf("sandbox list with filters: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := run(t, nil, "sandbox", "list", "--metadata", "novalue"); code != 2 {
		t.Errorf("--metadata without =: exit %d, stderr %q, want 2", code, errOut)
	}
	code, out, errOut = run(t, nil, "files", "stat", "sb-1", "/etc/hosts")
	if code != 0 || !strings.Contains(out, "/etc/hosts") || !strings.Contains(out, "0644") || !strings.Contains(out, "42") {
		t.Errorf("files stat: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, out, _ := run(t, nil, "files", "stat", "sb-1", "/etc/hosts", "-o", "json"); code != 0 || !strings.Contains(out, `"size": 42`) {
		t.Errorf("files stat -o json: exit %d, stdout %q", code, out)
	}
	if code, _, errOut := run(t, nil, "files", "stat", "sb-1", "/nope"); code != 1 || !strings.Contains(errOut, "no such file /nope") {
		t.Errorf("files stat of a missing file: exit %d, stderr %q", code, errOut)
	}
}
