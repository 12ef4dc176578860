package space

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// TestListSandboxesFilteredSendsFiltersAndReadsEveryPage: the filters go
// to the server as its query, each page asks for the next by its token,
// and the pages are joined.
func TestListSandboxesFilteredSendsFiltersAndReadsEveryPage(t *testing.T) {
	var mu sync.Mutex
	var queries []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries = append(queries, r.URL.RawQuery)
		mu.Unlock()
		q := r.URL.Query()
		if q.Get("state") != "running" || q.Get("template") != "code" || q.Get("name") != "n" ||
			!slices.Equal(q["metadata"], []string{"a=1", "b=x=y"}) || q.Get("limit") != "1000" {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, "query "+r.URL.RawQuery)
			return
		}
		page, _ := strconv.Atoi(q.Get("page_token"))
		list := sandboxv1.SandboxList{Sandboxes: []sandboxv1.Sandbox{{ID: "sb-" + strconv.Itoa(page)}}}
		if page < 2 {
			list.NextPageToken = strconv.Itoa(page + 1)
		}
		writeJSON(w, 200, list)
	})
	c := newTestServer(t, mux)
	got, err := c.ListSandboxesFiltered(context.Background(), SandboxFilter{State: sandboxv1.StateRunning, Template: "code", Name: "n",
		Metadata: map[string]string{"b": "x=y", "a": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, sb := range got {
		ids = append(ids, sb.ID)
	}
	if !slices.Equal(ids, []string{"sb-0", "sb-1", "sb-2"}) || len(queries) != 3 {
		t.Fatalf("ids %v after queries %v", ids, queries)
	}
}

func TestListSandboxesBadInputIsRefusedLocally(t *testing.T) {
	c := newTestServer(t, http.NewServeMux())
	if _, err := c.ListSandboxesPage(context.Background(), SandboxFilter{}, 0, ""); err == nil {
		t.Error("limit 0 was accepted")
	}
	if _, err := c.ListSandboxesFiltered(context.Background(), SandboxFilter{Metadata: map[string]string{"a=b": "c"}}); err == nil {
		t.Error("a metadata key with '=' was accepted")
	}
}

func TestListSandboxesAStuckTokenIsAnError(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, sandboxv1.SandboxList{Sandboxes: []sandboxv1.Sandbox{{ID: "sb"}}, NextPageToken: "same"})
	})
	if _, err := newTestServer(t, mux).ListSandboxesFiltered(context.Background(), SandboxFilter{}); err == nil {
		t.Fatal("a server repeating its page token made the listing loop or succeed")
	}
}

func TestStatFileAsksTheStatRoute(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/files/stat", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("path") {
		case "/etc/hosts":
			writeJSON(w, 200, sandboxv1.FileEntry{Path: "/etc/hosts", Type: "file", Size: 12})
		default:
			writeErr(w, 404, sandboxv1.CodeNotFound, "no such file")
		}
	})
	c := newTestServer(t, mux)
	e, err := c.StatFile(context.Background(), "sb-1", "/etc/hosts")
	if err != nil || e.Path != "/etc/hosts" || e.Type != "file" || e.Size != 12 {
		t.Fatalf("StatFile: %+v, %v", e, err)
	}
	_, err = c.StatFile(context.Background(), "sb-1", "/nope")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Code != sandboxv1.CodeNotFound {
		t.Fatalf("StatFile of a missing file: %v, want not_found", err)
	}
	if _, err := c.StatFile(context.Background(), "sb-1", ""); err == nil {
		t.Fatal("an empty path was accepted")
	}
}

// TestListSandboxesReadsEveryPage: a tenant whose unpaged listing is over
// the client's JSON body limit (2,500 sandboxes with 8 KiB of metadata, 20
// MiB) is still listed whole, in order, by pages each under it. The fake
// answers like the server: everything without a limit, pages with one.
func TestListSandboxesReadsEveryPage(t *testing.T) {
	const n = 2500
	all := make([]sandboxv1.Sandbox, n)
	pad := strings.Repeat("m", 8<<10)
	for i := range all {
		all[i] = sandboxv1.Sandbox{ID: fmt.Sprintf("sb-%05d", i), Metadata: map[string]string{"pad": pad}}
	}
	var mu sync.Mutex
	var limits []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		mu.Lock()
		limits = append(limits, q.Get("limit"))
		mu.Unlock()
		if q.Get("limit") == "" {
			writeJSON(w, 200, sandboxv1.SandboxList{Sandboxes: all})
			return
		}
		limit, _ := strconv.Atoi(q.Get("limit"))
		from, _ := strconv.Atoi(q.Get("page_token"))
		to := min(from+limit, n)
		list := sandboxv1.SandboxList{Sandboxes: all[from:to]}
		if to < n {
			list.NextPageToken = strconv.Itoa(to)
		}
		writeJSON(w, 200, list)
	})
	got, err := newTestServer(t, mux).ListSandboxes(context.Background())
	if err != nil {
		t.Fatalf("ListSandboxes of %d sandboxes: %v", n, err)
	}
	if len(got) != n || got[0].ID != "sb-00000" || got[n-1].ID != fmt.Sprintf("sb-%05d", n-1) {
		t.Fatalf("ListSandboxes: %d sandboxes, want %d in order", len(got), n)
	}
	if !slices.Equal(limits, []string{"1000", "1000", "1000"}) {
		t.Fatalf("requests with limits %q, want three pages of 1000", limits)
	}
}
