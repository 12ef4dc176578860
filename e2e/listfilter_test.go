package e2e

import (
	"net/http"
	"net/url"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// TestSandboxListFiltersPagesAndFileStat: GET /v1/sandboxes filters by
// state and pages by limit/page_token on a real server (every sandbox once,
// in creation order), the unfiltered answer is what it always was, and GET
// …/files/stat answers one file's entry, not_found for a missing one.
func TestSandboxListFiltersPagesAndFileStat(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	var ids []string
	for range 3 {
		sb := in.create("minimal")
		defer in.delete(sb.ID)
		ids = append(ids, sb.ID)
	}
	if code := in.do("POST", "/v1/sandboxes/"+ids[1]+"/pause", nil, nil); code != http.StatusOK && code != http.StatusAccepted {
		t.Fatalf("pause: HTTP %d", code)
	}

	var all sandboxv1.SandboxList
	if code := in.do("GET", "/v1/sandboxes", nil, &all); code != http.StatusOK || len(all.Sandboxes) != 3 || all.NextPageToken != "" {
		t.Fatalf("unfiltered list: HTTP %d, %d sandboxes, token %q", code, len(all.Sandboxes), all.NextPageToken)
	}
	var got []string
	token := ""
	for pages := 1; ; pages++ {
		u := "/v1/sandboxes?limit=2"
		if token != "" {
			u += "&page_token=" + url.QueryEscape(token)
		}
		var page sandboxv1.SandboxList
		if code := in.do("GET", u, nil, &page); code != http.StatusOK || len(page.Sandboxes) > 2 {
			t.Fatalf("page %d: HTTP %d, %d sandboxes", pages, code, len(page.Sandboxes))
		}
		for _, sb := range page.Sandboxes {
			got = append(got, sb.ID)
		}
		if token = page.NextPageToken; token == "" {
			break
		}
		if pages > 2 {
			t.Fatal("three sandboxes in pages of two and still a next page")
		}
	}
	if len(got) != 3 || got[0] != ids[0] || got[1] != ids[1] || got[2] != ids[2] {
		t.Errorf("pages listed %v, want %v (creation order)", got, ids)
	}
	var paused sandboxv1.SandboxList
	if code := in.do("GET", "/v1/sandboxes?state=paused", nil, &paused); code != http.StatusOK || len(paused.Sandboxes) != 1 || paused.Sandboxes[0].ID != ids[1] {
		t.Errorf("state=paused: HTTP %d, %+v, want %s alone", code, paused.Sandboxes, ids[1])
	}
	var bad sandboxv1.Error
	if code := in.do("GET", "/v1/sandboxes?state=sleeping", nil, &bad); code != http.StatusBadRequest || bad.Code != sandboxv1.CodeInvalidArgument {
		t.Errorf("state=sleeping: HTTP %d %+v, want 400 invalid_argument", code, bad)
	}

	in.exec(ids[0], "sh", "-c", "printf 12345 > /tmp/stat-me")
	var e sandboxv1.FileEntry
	if code := in.do("GET", "/v1/sandboxes/"+ids[0]+"/files/stat?path=/tmp/stat-me", nil, &e); code != http.StatusOK || e.Name != "stat-me" || e.Type != "file" || e.Size != 5 {
		t.Errorf("stat: HTTP %d %+v, want the 5-byte file", code, e)
	}
	if code := in.do("GET", "/v1/sandboxes/"+ids[0]+"/files/stat?path=/tmp/no-such-file", nil, &bad); code != http.StatusNotFound {
		t.Errorf("stat of a missing file: HTTP %d %+v, want 404", code, bad)
	}
}
