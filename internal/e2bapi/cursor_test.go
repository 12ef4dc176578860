package e2bapi

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
)

// TestPageTokenBound: a page token opens for the tenant and listing it was
// sealed for only; another tenant's, the other listing's, an edited, a
// truncated or an old-style (unsigned "nanos.id") token is refused.
func TestPageTokenBound(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	a := pageCursor{key: key, tenant: "tenant-a", kind: pageSandboxes}
	it := pageItem{id: "abcdefghij0123456789", at: time.Unix(1700000000, 42)}
	tok := a.seal(it)
	if got, ok := a.open(tok); !ok || got.id != it.id || !got.at.Equal(it.at) {
		t.Fatalf("open(seal(%+v)) = %+v, %v", it, got, ok)
	}
	if strings.Contains(tok, it.id) || strings.Contains(tok, "1700000000") {
		t.Errorf("token %q shows the position in the clear", tok)
	}
	refused := map[string]struct {
		cur pageCursor
		tok string
	}{
		"another tenant":    {pageCursor{key: key, tenant: "tenant-b", kind: pageSandboxes}, tok},
		"another listing":   {pageCursor{key: key, tenant: "tenant-a", kind: pageSnapshots}, tok},
		"another key":       {pageCursor{key: []byte("another key"), tenant: "tenant-a", kind: pageSandboxes}, tok},
		"unsigned old form": {a, "1700000000000000042." + it.id},
		"truncated":         {a, tok[:len(tok)-2]},
		"empty":             {a, ""},
	}
	for i := range tok {
		b := []byte(tok)
		b[i] ^= 1 // base64url stays base64url or becomes invalid: both refused
		if got, ok := a.open(string(b)); ok {
			t.Errorf("token edited at byte %d opens: %q to %+v", i, b, got)
		}
	}
	for name, tc := range refused {
		if got, ok := tc.cur.open(tc.tok); ok {
			t.Errorf("%s: token %q opens to %+v", name, tc.tok, got)
		}
	}
}

// FuzzOpenPageToken: no input panics, and whatever opens is canonical (it
// is exactly the token seal gives for its position) and opens for its
// tenant and listing only.
func FuzzOpenPageToken(f *testing.F) {
	a := pageCursor{key: []byte("fuzz-key"), tenant: "tenant-a", kind: pageSandboxes}
	f.Add(a.seal(pageItem{id: "abcdefghij0123456789", at: time.Unix(1700000000, 0)}))
	f.Add(pageCursor{key: a.key, tenant: "tenant-a", kind: pageSnapshots}.seal(pageItem{id: "sn-abcdefghij012345", at: time.Unix(0, 0)}))
	f.Add("1700000000000000000.abcdefghij0123456789")
	f.Add("AQ")
	f.Fuzz(func(t *testing.T, tok string) {
		it, ok := a.open(tok)
		if !ok {
			return
		}
		if again := a.seal(*it); again != tok {
			t.Fatalf("token %q opens to %+v, which seals as %q", tok, it, again)
		}
		if _, ok := (pageCursor{key: a.key, tenant: "tenant-b", kind: pageSandboxes}).open(tok); ok {
			t.Fatalf("token %q opens for another tenant", tok)
		}
	})
}

// BenchmarkPageToken: sealing and opening a signed page token, against
// the unsigned "nanos.id" token it replaced as the baseline of the same
// run (go test -run '^$' -bench BenchmarkPageToken ./internal/server).
func BenchmarkPageToken(b *testing.B) {
	it := pageItem{id: "abcdefghij0123456789", at: time.Unix(1700000000, 42)}
	b.Run("unsigned baseline", func(b *testing.B) {
		for range b.N {
			tok := strconv.FormatInt(it.at.UnixNano(), 10) + "." + it.id
			ns, id, _ := strings.Cut(tok, ".")
			n, _ := strconv.ParseInt(ns, 10, 64)
			if id != it.id || n != it.at.UnixNano() || !sandbox.ValidID(id) {
				b.Fatal("round trip")
			}
		}
	})
	cur := pageCursor{key: make([]byte, 32), tenant: "t-abcdefghij012345", kind: pageSandboxes}
	b.Run("signed", func(b *testing.B) {
		for range b.N {
			if _, ok := cur.open(cur.seal(it)); !ok {
				b.Fatal("round trip")
			}
		}
	})
}

// TestE2BPageOrder pins E2B's default order, newest first, and the two
// explicit ones.
func TestE2BPageOrder(t *testing.T) {
	cur := pageCursor{key: []byte("0123456789abcdef0123456789abcdef"), tenant: "t", kind: pageSandboxes}
	t0 := time.Unix(1700000000, 0)
	items := func() []pageItem {
		return []pageItem{{id: "b", at: t0.Add(time.Second)}, {id: "a", at: t0}, {id: "c", at: t0.Add(2 * time.Second)}}
	}
	for q, want := range map[string]string{"": "c,b,a", "order=desc": "c,b,a", "order=asc": "a,b,c"} {
		vals, _ := url.ParseQuery(q)
		p, err := parseE2BPage(vals, cur)
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		got, _ := p.apply(items())
		var ids []string
		for _, it := range got {
			ids = append(ids, it.id)
		}
		if strings.Join(ids, ",") != want {
			t.Errorf("%q: %v, want %s", q, ids, want)
		}
	}
	if _, err := parseE2BPage(url.Values{"order": {"newest"}}, cur); err == nil || !strings.Contains(err.Error(), "want asc or desc") {
		t.Errorf("order=newest: %v, want a clear error", err)
	}
}
