package credentials

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFileAuditLogQuery(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := OpenFileAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 10 {
		e := AuditEntry{Time: base.Add(time.Duration(i) * time.Second), Tenant: "t1", Sandbox: fmt.Sprintf("sb%d", i%2),
			ExecutionID: "ex", Host: "api.example.com", CredentialID: fmt.Sprintf("c%d", i%3), Allowed: i%2 == 0, Reason: ReasonResolved}
		if i == 7 {
			e.Tenant = "t2"
		}
		if err := l.Record(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// A malformed line, an over-long one, and a torn last line (a crash in
	// the middle of a write) are skipped.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "not json\n{\"tenant\":\"t1\",\"host\":\"%s\"}\n{\"time\":\"2031-01-01T00:00:00Z\",\"tenant\":\"t1\",\"host\":\"torn", strings.Repeat("x", 20<<10))
	f.Close()

	seconds := func(es []AuditEntry) []int {
		var out []int
		for _, e := range es {
			out = append(out, int(e.Time.Sub(base)/time.Second))
		}
		return out
	}
	for _, tc := range []struct {
		q    AuditQuery
		want []int
	}{
		{AuditQuery{Tenant: "t1"}, []int{9, 8, 6, 5, 4, 3, 2, 1, 0}},
		{AuditQuery{Tenant: "t1", Limit: 3}, []int{9, 8, 6}},
		{AuditQuery{Tenant: "t1", Sandbox: "sb1"}, []int{9, 5, 3, 1}},
		{AuditQuery{Tenant: "t1", CredentialID: "c0"}, []int{9, 6, 3, 0}},
		{AuditQuery{Tenant: "t1", Sandbox: "sb0", CredentialID: "c0", Limit: 1}, []int{6}},
		{AuditQuery{Tenant: "t2"}, []int{7}},
		{AuditQuery{Tenant: "t3"}, nil},
	} {
		got, err := l.Query(ctx, tc.q)
		if err != nil {
			t.Fatalf("Query(%+v): %v", tc.q, err)
		}
		if fmt.Sprint(seconds(got)) != fmt.Sprint(tc.want) {
			t.Errorf("Query(%+v) = %v, want %v", tc.q, seconds(got), tc.want)
		}
	}
	if _, err := l.Query(ctx, AuditQuery{}); err == nil {
		t.Error("a query without a tenant was accepted")
	}
	if _, err := l.Query(ctx, AuditQuery{Tenant: "t1", Limit: -1}); err == nil {
		t.Error("a negative limit was accepted")
	}
	// Appending after a torn line: the entry glued to the torn fragment is
	// recovered, and the torn one is not.
	if err := l.Record(ctx, AuditEntry{Time: base, Tenant: "t9", Host: "h"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Record(ctx, AuditEntry{Time: base, Tenant: "t9", Host: "h2"}); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Query(ctx, AuditQuery{Tenant: "t9"}); err != nil || len(got) != 2 || got[0].Host != "h2" || got[1].Host != "h" {
		t.Errorf("after a torn line: %+v, %v", got, err)
	}
	if got, _ := l.Query(ctx, AuditQuery{Tenant: "t1"}); len(got) != 9 {
		t.Errorf("the torn entry was read: %d entries of t1, want 9", len(got))
	}
}

func TestFileAuditLogQueryLimitCap(t *testing.T) {
	ctx := t.Context()
	l, err := OpenFileAuditLog(filepath.Join(t.TempDir(), "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range MaxAuditLimit + 5 {
		if err := l.Record(ctx, AuditEntry{Tenant: "t", Host: "h"}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Query(ctx, AuditQuery{Tenant: "t", Limit: 5 * MaxAuditLimit})
	if err != nil || len(got) != MaxAuditLimit {
		t.Errorf("Query with a limit over the cap = %d entries, %v; want %d", len(got), err, MaxAuditLimit)
	}
	got, err = l.Query(ctx, AuditQuery{Tenant: "t"})
	if err != nil || len(got) != DefaultAuditLimit {
		t.Errorf("Query without a limit = %d entries, %v; want %d", len(got), err, DefaultAuditLimit)
	}
}

// FuzzScanAudit feeds arbitrary file contents to the reader: it must not
// panic, and every entry it yields comes from a complete line.
func FuzzScanAudit(f *testing.F) {
	f.Add([]byte(`{"tenant":"t","host":"h","allowed":true,"reason":"resolved"}` + "\n"))
	f.Add([]byte("{\"tenant\":\"t\"}\n{\"tenant\""))
	f.Add([]byte("\n\n\n"))
	f.Add(bytes.Repeat([]byte("a"), 70<<10))
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		err := scanAudit(context.Background(), bytes.NewReader(data), func(AuditEntry) { n++ })
		if err != nil {
			t.Fatalf("scanAudit: %v", err)
		}
		if n > bytes.Count(data, []byte("\n")) {
			// One entry at most per complete line.
			t.Fatalf("%d entries from %d complete lines", n, bytes.Count(data, []byte("\n")))
		}
	})
}
