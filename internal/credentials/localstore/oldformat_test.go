package localstore

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestOldFormatOpens: a key file and store written by the code before
// internal/seal (testdata/oldformat, made by that code) open, and a store
// rewritten by this code still opens.
func TestOldFormatOpens(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"store.key", "credentials.store"} {
		data, err := os.ReadFile(filepath.Join("testdata/oldformat", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path, keyPath := filepath.Join(dir, "credentials.store"), filepath.Join(dir, "store.key")
	s, err := Open(path, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.Get(context.Background(), "cred-old")
	if err != nil {
		t.Fatal(err)
	}
	if string(c.Secret) != "s3cret-old" || c.Scope.Tenant != "t1" || c.Injection.Name != "Authorization" {
		t.Errorf("old credential = %+v (secret %q)", c, c.Secret)
	}
	if err := s.Delete(context.Background(), "nothing"); err == nil {
		t.Fatal("deleted a credential that does not exist")
	}
	c.Name = "rewritten"
	if err := s.Put(context.Background(), *c); err != nil {
		t.Fatal(err)
	}
	again, err := Open(path, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := again.Get(context.Background(), "cred-old"); err != nil || got.Name != "rewritten" {
		t.Errorf("after a rewrite: %+v, %v", got, err)
	}
}
