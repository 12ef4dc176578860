package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// TestListLargeDirectoryByPages: a directory past the unpaged listing limit
// (100,000 entries) in a real ns sandbox is refused whole with an answer that
// says to page, and listed by pages through the REST API and the CLI, every
// entry exactly once; a page token of another directory is refused.
func TestListLargeDirectoryByPages(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	sb := in.create("minimal")
	defer in.delete(sb.ID)

	const files, dir = 120_000, "/home/user/many"
	res := in.exec(sb.ID, "sh", "-c", fmt.Sprintf("mkdir %s && cd %s && seq 1 %d | xargs touch && ls -A | wc -l", dir, dir, files))
	if got := strings.TrimSpace(res.Stdout); got != fmt.Sprint(files) {
		t.Fatalf("creating %d files: exit %d, %q entries, stderr %q", files, res.ExitCode, got, res.Stderr)
	}
	list := "/v1/sandboxes/" + sb.ID + "/files/list?path=" + url.QueryEscape(dir)

	var refusal sandboxv1.Error
	if code := in.do("GET", list, nil, &refusal); code != http.StatusServiceUnavailable || refusal.Code != sandboxv1.CodeResourceExhausted || !strings.Contains(refusal.Message, "limit=") {
		t.Errorf("unpaged listing of %d entries: HTTP %d %+v, want 503 resource_exhausted saying to page with limit=", files, code, refusal)
	}

	seen := make(map[string]bool, files)
	token, pages, last := "", 0, ""
	for {
		u := list + "&limit=10000"
		if token != "" {
			u += "&page_token=" + url.QueryEscape(token)
		}
		var page sandboxv1.FileList
		if code := in.do("GET", u, nil, &page); code != http.StatusOK {
			t.Fatalf("page %d: HTTP %d", pages, code)
		}
		pages++
		for _, e := range page.Entries {
			if seen[e.Name] {
				t.Fatalf("page %d: %s served twice", pages, e.Name)
			}
			seen[e.Name] = true
		}
		if page.NextPageToken == "" {
			break
		}
		if pages > files/10000+1 {
			t.Fatalf("%d pages of 10,000 for %d entries and still a next token", pages, files)
		}
		last, token = page.NextPageToken, page.NextPageToken
	}
	if len(seen) != files || !seen["1"] || !seen[fmt.Sprint(files)] {
		t.Errorf("%d pages served %d distinct entries, want all %d", pages, len(seen), files)
	}

	var bad sandboxv1.Error
	other := "/v1/sandboxes/" + sb.ID + "/files/list?path=/home/user&limit=10&page_token=" + url.QueryEscape(last)
	if code := in.do("GET", other, nil, &bad); code != http.StatusBadRequest || !strings.Contains(bad.Message, "another directory") {
		t.Errorf("a token of %s used on /home/user: HTTP %d %+v, want 400 naming another directory", dir, code, bad)
	}
	if code := in.do("GET", list+"&limit=10&page_token=not-a-token", nil, &bad); code != http.StatusBadRequest {
		t.Errorf("a forged token: HTTP %d %+v, want 400", code, bad)
	}

	out, errOut, code := in.cli("", "files", "ls", sb.ID, dir, "--limit", "5")
	if rows := strings.Count(out, dir+"/"); code != 0 || rows != 5 || !strings.Contains(errOut, "--page-token ") {
		t.Errorf("space files ls --limit 5: exit %d, %d rows, stdout %q, stderr %q", code, rows, out, errOut)
	}
}
