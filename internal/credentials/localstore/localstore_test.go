package localstore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
)

const secret = "ghp_VERYSECRETTOKEN0123456789"

func newStore(t *testing.T) (s *Store, path, keyPath string) {
	t.Helper()
	dir := t.TempDir()
	keyPath = filepath.Join(dir, "store.key")
	if err := GenerateKeyFile(keyPath); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "credentials.db")
	s, err := Open(path, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	return s, path, keyPath
}

func testCred(id string, scope credentials.Scope) credentials.Credential {
	return credentials.Credential{
		ID: id, Scope: scope, Name: "GitHub token " + id,
		Secret:       []byte(secret + "-" + id),
		Injection:    credentials.Injection{Method: credentials.MethodHeader, Name: "Authorization"},
		AllowedHosts: []string{"api.github.com", "*.githubusercontent.com"},
		ExpiresAt:    time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
		RateLimit:    60,
	}
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, path, keyPath := newStore(t)
	a := testCred("a", credentials.Scope{Tenant: "t1"})
	b := testCred("b", credentials.Scope{Tenant: "t1", Project: "p1", Sandbox: "sb1"})
	for _, c := range []credentials.Credential{a, b} {
		if err := s.Put(ctx, c); err != nil {
			t.Fatalf("Put(%s): %v", c.ID, err)
		}
	}
	if a.Secret[0] != secret[0] {
		t.Fatalf("Put zeroed the caller's secret")
	}
	// A second Store over the same files sees the same credentials.
	s2, err := Open(path, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Get(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%#v|%s", got.Metadata(), got.Secret) != fmt.Sprintf("%#v|%s", b.Metadata(), b.Secret) ||
		!got.ExpiresAt.Equal(b.ExpiresAt) || got.RateLimit != 60 || len(got.AllowedHosts) != 2 {
		t.Errorf("Get = %v (secret ok: %v), want %v", got, bytes.Equal(got.Secret, b.Secret), b)
	}
	list, err := s2.List(ctx, credentials.Scope{Tenant: "t1"})
	if err != nil || len(list) != 1 || list[0].ID != "a" {
		t.Errorf("List(t1) = %v, %v; want [a]", list, err)
	}
	// Replace in place, then a move across scopes is a conflict.
	a.Name = "renamed"
	if err := s.Put(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got, _ := s2.Get(ctx, "a"); got == nil || got.Name != "renamed" {
		t.Errorf("after replace Get = %v", got)
	}
	a.Scope.Project = "p2"
	if err := s.Put(ctx, a); !errdefs.IsConflict(err) {
		t.Errorf("Put into another scope: %v, want ErrConflict", err)
	}
	if err := s.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Get(ctx, "a"); !errdefs.IsNotFound(err) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "a"); !errdefs.IsNotFound(err) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if err := s.Put(ctx, credentials.Credential{ID: "x"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("invalid Put: %v, want ErrInvalidArgument", err)
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("VERYSECRET")) || bytes.Contains(data, []byte("github")) {
		t.Errorf("store file holds plaintext")
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("store mode %#o, want 0600", st.Mode().Perm())
	}
	if left, _ := filepath.Glob(path + ".tmp-*"); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestTamperDetected(t *testing.T) {
	ctx := context.Background()
	s, path, _ := newStore(t)
	if err := s.Put(ctx, testCred("a", credentials.Scope{Tenant: "t1"})); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Flip one bit at every offset class: magic, fingerprint, nonce, body, tag.
	for _, off := range []int{0, len(magic), len(magic) + fpLen, headerLen, headerLen + 10, len(orig) - 1} {
		bad := bytes.Clone(orig)
		bad[off] ^= 0x01
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.List(ctx, credentials.Scope{Tenant: "t1"}); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("bit flipped at %d: List = %v, want ErrFailedPrecondition", off, err)
		}
		if err := s.Put(ctx, testCred("b", credentials.Scope{Tenant: "t1"})); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("bit flipped at %d: Put = %v, want ErrFailedPrecondition (never overwrite a damaged store)", off, err)
		}
	}
	for _, bad := range [][]byte{orig[:len(orig)-1], orig[:headerLen], {}} {
		os.WriteFile(path, bad, 0o600)
		if _, err := s.Get(ctx, "a"); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("truncated to %d bytes: %v, want ErrFailedPrecondition", len(bad), err)
		}
	}
}

func TestWrongKeyRefused(t *testing.T) {
	ctx := context.Background()
	s, path, _ := newStore(t)
	if err := s.Put(ctx, testCred("a", credentials.Scope{Tenant: "t1"})); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other.key")
	if err := GenerateKeyFile(other); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, other)
	if !errdefs.IsFailedPrecondition(err) || !bytes.Contains([]byte(err.Error()), []byte("another key")) {
		t.Errorf("Open with another key: %v, want ErrFailedPrecondition naming the key", err)
	}
}

func TestKeyFileChecks(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k")
	if err := GenerateKeyFile(key); err != nil {
		t.Fatal(err)
	}
	if err := GenerateKeyFile(key); !errdefs.IsConflict(err) {
		t.Errorf("GenerateKeyFile over an existing file: %v, want ErrConflict", err)
	}
	store := filepath.Join(dir, "db")
	link := filepath.Join(dir, "k-link")
	os.Symlink(key, link)
	loose := filepath.Join(dir, "k-loose")
	data, _ := os.ReadFile(key)
	os.WriteFile(loose, data, 0o644)
	short := filepath.Join(dir, "k-short")
	os.WriteFile(short, data[:40], 0o600)
	nothex := filepath.Join(dir, "k-nothex")
	os.WriteFile(nothex, bytes.Repeat([]byte("zz"), KeyLen), 0o600)
	for _, k := range []string{link, loose, short, nothex, filepath.Join(dir, "missing")} {
		if _, err := Open(store, k); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("Open with key %s: %v, want ErrFailedPrecondition", filepath.Base(k), err)
		}
	}
}

func TestStoreSymlinkRefused(t *testing.T) {
	ctx := context.Background()
	s, path, keyPath := newStore(t)
	if err := s.Put(ctx, testCred("a", credentials.Scope{Tenant: "t1"})); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(filepath.Dir(path), "link.db")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(link, keyPath); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Open through a symlink: %v, want ErrFailedPrecondition", err)
	}
}

func TestConcurrentUse(t *testing.T) {
	ctx := context.Background()
	s, path, keyPath := newStore(t)
	s2, err := Open(path, keyPath) // a second handle, as another process would have
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			st := s
			if g%2 == 1 {
				st = s2
			}
			for i := range 10 {
				c := testCred(fmt.Sprintf("c-%d-%d", g, i), credentials.Scope{Tenant: "t1"})
				if err := st.Put(ctx, c); err != nil {
					t.Error(err)
					return
				}
				if _, err := st.List(ctx, credentials.Scope{Tenant: "t1"}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	list, err := s.List(ctx, credentials.Scope{Tenant: "t1"})
	if err != nil || len(list) != 40 {
		t.Errorf("after concurrent Puts: %d credentials, %v; want 40 (a lost update?)", len(list), err)
	}
}

// TestManagerOverStore runs the Manager on the real store with a file audit
// log and greps both files for the secret.
func TestManagerOverStore(t *testing.T) {
	ctx := context.Background()
	s, path, _ := newStore(t)
	if err := s.Put(ctx, testCred("tenant", credentials.Scope{Tenant: "t1"})); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, testCred("sb", credentials.Scope{Tenant: "t1", Sandbox: "sb1"})); err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	audit, err := credentials.OpenFileAuditLog(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer audit.Close()
	m := credentials.NewManager(s, audit)
	got, err := m.Resolve(ctx, credentials.Request{Tenant: "t1", Sandbox: "sb1", ExecutionID: "e1", Host: "API.GitHub.com."})
	if err != nil || got.ID != "sb" || string(got.Secret) != secret+"-sb" {
		t.Fatalf("Resolve = %v, %v; want sb", got, err)
	}
	got.Zero()
	if _, err := m.Resolve(ctx, credentials.Request{Tenant: "t1", Sandbox: "sb1", Host: "evil.example"}); !errdefs.IsPermissionDenied(err) {
		t.Errorf("Resolve for another host: %v, want ErrPermissionDenied", err)
	}
	for _, p := range []string{path, auditPath} {
		data, _ := os.ReadFile(p)
		if bytes.Contains(data, []byte("VERYSECRET")) {
			t.Errorf("%s contains the secret", p)
		}
	}
	data, _ := os.ReadFile(auditPath)
	if n := bytes.Count(data, []byte("\n")); n != 2 || !bytes.Contains(data, []byte(`"allowed":true`)) || !bytes.Contains(data, []byte(`"allowed":false`)) {
		t.Errorf("audit log:\n%s", data)
	}
}
