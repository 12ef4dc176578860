package credentials

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestFileAuditLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := OpenFileAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	b := &MemoryBackend{}
	c := cred("c1", Scope{Tenant: "t1"}, "a.example.com")
	c.Secret = []byte("TOPSECRET-value-42")
	c.RateLimit = 1
	if err := b.Put(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: t0}
	m := NewManager(b, log, WithClock(clk.Now))
	req := Request{Tenant: "t1", Sandbox: "sb1", ExecutionID: "ex-1", Host: "a.example.com"}
	got, err := m.Resolve(context.Background(), req)
	if err != nil || string(got.Secret) != "TOPSECRET-value-42" {
		t.Fatalf("Resolve = %v, %v", got, err)
	}
	if _, err := m.Resolve(context.Background(), req); !errdefs.IsResourceExhausted(err) {
		t.Fatalf("second Resolve: %v, want rate limited", err)
	}
	req.Host = "b.example.com"
	if _, err := m.Resolve(context.Background(), req); !errdefs.IsPermissionDenied(err) {
		t.Fatalf("third Resolve: %v, want permission denied", err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}

	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Errorf("audit file mode %#o, want 0600", perm)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("TOPSECRET")) {
		t.Fatalf("audit file contains the secret:\n%s", data)
	}
	var entries []AuditEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var e AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		entries = append(entries, e)
	}
	if len(entries) != 3 {
		t.Fatalf("%d entries, want 3:\n%s", len(entries), data)
	}
	wantAllowed := []bool{true, false, false}
	wantReason := []string{ReasonResolved, ReasonRateLimited, ReasonHostMismatch}
	for i, e := range entries {
		if e.Allowed != wantAllowed[i] || e.Reason != wantReason[i] || e.ExecutionID != "ex-1" || e.Sandbox != "sb1" || !e.Time.Equal(t0) {
			t.Errorf("entry %d = %+v, want allowed=%v reason=%q", i, e, wantAllowed[i], wantReason[i])
		}
	}

	// Reopening appends; it never truncates.
	log2, err := OpenFileAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer log2.Close()
	if err := log2.Record(context.Background(), AuditEntry{Tenant: "t9", Host: "x"}); err != nil {
		t.Fatal(err)
	}
	data2, _ := os.ReadFile(path)
	if !bytes.HasPrefix(data2, data) || bytes.Count(data2, []byte("\n")) != 4 {
		t.Errorf("reopened log did not append:\n%s", data2)
	}
	if err := log.Record(context.Background(), AuditEntry{}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Record after Close: %v, want ErrFailedPrecondition", err)
	}
}

func TestFileAuditLogRefuses(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.jsonl")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFileAuditLog(link); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("symlink: %v, want ErrFailedPrecondition", err)
	}
	open := filepath.Join(dir, "open.jsonl")
	if err := os.WriteFile(open, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFileAuditLog(open); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("mode 0644: %v, want ErrFailedPrecondition", err)
	}
	if _, err := OpenFileAuditLog(dir); err == nil {
		t.Errorf("directory accepted as an audit log")
	}
}

func TestFileAuditLogConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := OpenFileAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for range 25 {
				if err := log.Record(context.Background(), AuditEntry{Tenant: "t", Sandbox: string(rune('a' + g)), Host: "h"}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	data, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
	if len(lines) != 100 {
		t.Fatalf("%d lines, want 100", len(lines))
	}
	for _, l := range lines {
		if !json.Valid(l) {
			t.Fatalf("interleaved line %q", l)
		}
	}
}
