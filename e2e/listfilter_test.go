package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"
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

	// The Go SDK and the CLI use the same filters and route.
	c := space.NewClient(in.url, in.key)
	list, err := c.ListSandboxesFiltered(t.Context(), space.SandboxFilter{State: sandboxv1.StatePaused, Template: "minimal"})
	if err != nil || len(list) != 1 || list[0].ID != ids[1] {
		t.Errorf("SDK ListSandboxesFiltered(paused, minimal): %v %+v, want %s alone", err, list, ids[1])
	}
	var sdkIDs []string
	for token := ""; ; {
		page, err := c.ListSandboxesPage(t.Context(), space.SandboxFilter{}, 1, token)
		if err != nil {
			t.Fatalf("SDK ListSandboxesPage: %v", err)
		}
		for _, sb := range page.Sandboxes {
			sdkIDs = append(sdkIDs, sb.ID)
		}
		if token = page.NextPageToken; token == "" || len(sdkIDs) > 3 {
			break
		}
	}
	if len(sdkIDs) != 3 || sdkIDs[0] != ids[0] || sdkIDs[2] != ids[2] {
		t.Errorf("SDK pages of one listed %v, want %v", sdkIDs, ids)
	}
	// A filter and pages together: the two running sandboxes, one a page.
	var running []string
	pages := 0
	for token := ""; ; {
		page, err := c.ListSandboxesPage(t.Context(), space.SandboxFilter{State: sandboxv1.StateRunning, Template: "minimal"}, 1, token)
		if err != nil {
			t.Fatalf("SDK ListSandboxesPage(running, minimal): %v", err)
		}
		pages++
		for _, sb := range page.Sandboxes {
			running = append(running, sb.ID)
		}
		if token = page.NextPageToken; token == "" || pages > 3 {
			break
		}
	}
	if len(running) != 2 || running[0] != ids[0] || running[1] != ids[2] || pages != 2 {
		t.Errorf("SDK pages of one of the running sandboxes: %v in %d pages, want [%s %s] in 2", running, pages, ids[0], ids[2])
	}
	// ListSandboxes reads the same pages (limit=1000): all three, oldest first.
	if all, err := c.ListSandboxes(t.Context()); err != nil || len(all) != 3 || all[0].ID != ids[0] || all[1].ID != ids[1] || all[2].ID != ids[2] {
		t.Errorf("SDK ListSandboxes: %v %+v, want %v in order", err, all, ids)
	}
	if list, err := c.ListSandboxesFiltered(t.Context(), space.SandboxFilter{Template: "no-such-template"}); err != nil || len(list) != 0 {
		t.Errorf("SDK template=no-such-template: %v %+v, want none", err, list)
	}
	if fe, err := c.StatFile(t.Context(), ids[0], "/tmp/stat-me"); err != nil || fe.Size != 5 || fe.Type != "file" {
		t.Errorf("SDK StatFile: %+v %v", fe, err)
	}
	if _, err := c.StatFile(t.Context(), ids[0], "/tmp/no-such-file"); !space.IsNotFound(err) {
		t.Errorf("SDK StatFile of a missing file: %v, want not_found", err)
	}
	out, errOut, code := in.cli("", "sandbox", "list", "--state", "paused", "--template", "minimal")
	if code != 0 || !strings.Contains(out, ids[1]) || strings.Contains(out, ids[0]) || strings.Contains(out, ids[2]) {
		t.Errorf("space sandbox list --state paused: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = in.cli("", "files", "stat", ids[0], "/tmp/stat-me")
	if code != 0 || !strings.Contains(out, "/tmp/stat-me") || !strings.Contains(out, " 5 ") {
		t.Errorf("space files stat: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := in.cli("", "files", "stat", ids[0], "/tmp/no-such-file"); code != 1 || !strings.Contains(errOut, "not_found") && !strings.Contains(errOut, "not found") {
		t.Errorf("space files stat of a missing file: exit %d %s", code, errOut)
	}
}
