package restapi

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

func listed() []sandboxv1.Sandbox {
	t0 := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	var out []sandboxv1.Sandbox
	// Store order is not creation order; two share a creation time.
	for i, n := range []int{3, 0, 4, 1, 2} {
		created := t0.Add(time.Duration(n) * time.Second)
		if n == 4 {
			created = t0.Add(3 * time.Second)
		}
		st := sandboxv1.StateRunning
		if i%2 == 1 {
			st = sandboxv1.StatePaused
		}
		out = append(out, sandboxv1.Sandbox{ID: fmt.Sprintf("sb-%d", n), Name: fmt.Sprintf("n%d", n%2), State: st, Template: "minimal",
			Metadata: map[string]string{"n": fmt.Sprint(n), "team": "a"}, CreatedAt: created})
	}
	out[4].Template = "base"
	return out
}

func ids(sbs []sandboxv1.Sandbox) string {
	var s []string
	for _, sb := range sbs {
		s = append(s, sb.ID)
	}
	return strings.Join(s, ",")
}

func TestSandboxQueryFilters(t *testing.T) {
	tests := []struct{ query, want string }{
		{"", "sb-3,sb-0,sb-4,sb-1,sb-2"}, // unfiltered, unpaged: the store's order, as before
		{"state=paused", "sb-0,sb-1"},
		{"state=running&template=minimal", "sb-3,sb-4"},
		{"template=base", "sb-2"},
		{"name=n1", "sb-3,sb-1"},
		{"metadata=team=a&metadata=n=4", "sb-4"},
		{"metadata=team=b", ""},
		{"metadata=n=4&state=paused", ""},
		{"metadata=nokey=", ""}, // an empty value matches a key that is there with ""
	}
	for _, tt := range tests {
		v, _ := url.ParseQuery(tt.query)
		q, err := parseSandboxQuery(v)
		if err != nil {
			t.Fatalf("%q: %v", tt.query, err)
		}
		got, next := q.page(listed())
		if ids(got) != tt.want || next != "" {
			t.Errorf("%q: %q next %q, want %q", tt.query, ids(got), next, tt.want)
		}
		if got == nil {
			t.Errorf("%q: nil list (answered as null, not [])", tt.query)
		}
	}
}

func TestSandboxQueryPages(t *testing.T) {
	all := listed()
	var pages []string
	token := ""
	for i := 0; ; i++ {
		v := url.Values{"limit": {"2"}}
		if token != "" {
			v.Set("page_token", token)
		}
		q, err := parseSandboxQuery(v)
		if err != nil {
			t.Fatal(err)
		}
		page, next := q.page(all)
		pages = append(pages, ids(page))
		if next == "" {
			break
		}
		if i > 5 {
			t.Fatal("the pages do not end")
		}
		token = next
		// A sandbox created between the pages, before where the page
		// ended, and the deletion of the last one listed change nothing
		// of what comes next.
		if i == 0 {
			all = append(all[:1:1], all[2:]...) // sb-0 was listed; delete it
			all = append(all, sandboxv1.Sandbox{ID: "sb-00", CreatedAt: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)})
		}
	}
	// By created_at then id: sb-0 sb-1 | sb-2 sb-3 | sb-4 (sb-3 and sb-4 share a time).
	if got := strings.Join(pages, " | "); got != "sb-0,sb-1 | sb-2,sb-3 | sb-4" {
		t.Errorf("pages %q", got)
	}
	// A filtered page counts only matches.
	q, _ := parseSandboxQuery(url.Values{"limit": {"1"}, "state": {"paused"}})
	page, next := q.page(listed())
	if ids(page) != "sb-0" || next == "" {
		t.Fatalf("first paused page %q next %q", ids(page), next)
	}
	q, _ = parseSandboxQuery(url.Values{"limit": {"1"}, "state": {"paused"}, "page_token": {next}})
	if page, next = q.page(listed()); ids(page) != "sb-1" || next != "" {
		t.Errorf("second paused page %q next %q, want sb-1 and the end", ids(page), next)
	}
}

func TestSandboxQueryRefusesBadInput(t *testing.T) {
	for _, query := range []string{
		"state=sleeping", "state=deleted", "metadata=novalue", "metadata==v", "limit=0", "limit=1001", "limit=x",
		"page_token=!!", "page_token=" + encodeSandboxToken(time.Now(), "")[:4], "page_token=" + strings.Repeat("A", 300),
		"page_token=czIuMS5zYi0x", // "s2.1.sb-1": another version
	} {
		v, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		_, err = parseSandboxQuery(v)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v, want invalid argument", query, err)
			continue
		}
		if st, _ := statusOf(err); st != 400 {
			t.Errorf("%q: status %d", query, st)
		}
	}
}

func TestSandboxTokenRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 7, 1, 2, 3, 456789012, time.UTC)
	tm, id, err := decodeSandboxToken(encodeSandboxToken(at, "sb-abc.def"))
	if err != nil || !tm.Equal(at) || id != "sb-abc.def" {
		t.Errorf("round trip: %v %q %v", tm, id, err)
	}
}

func FuzzDecodeSandboxToken(f *testing.F) {
	f.Add(encodeSandboxToken(time.Unix(1, 2), "sb-1"))
	f.Add("czEuLTEuc2ItMQ")
	f.Fuzz(func(t *testing.T, tok string) {
		tm, id, err := decodeSandboxToken(tok)
		if err == nil && (id == "" || tm.UnixNano() < 0) {
			t.Fatalf("%q decoded to %v %q", tok, tm, id)
		}
	})
}
