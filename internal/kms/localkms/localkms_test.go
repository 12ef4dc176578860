package localkms

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/kms"
)

func open(t *testing.T, dir string) *KMS {
	t.Helper()
	k, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return k
}

func TestWrapUnwrap(t *testing.T) {
	ctx := t.Context()
	k := open(t, t.TempDir())
	id, err := k.CreateKey(ctx, "t-acme")
	if err != nil {
		t.Fatal(err)
	}
	other, err := k.CreateKey(ctx, "t-acme")
	if err != nil {
		t.Fatal(err)
	}
	dataKey := bytes.Repeat([]byte{0x42}, 32)
	aad := []byte("tenant t-acme sandbox s1 artifact memory")
	wrapped, err := k.WrapKey(ctx, id, dataKey, aad)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(wrapped, dataKey[:8]) {
		t.Fatal("the wrapped key contains the data key in the clear")
	}
	again, _ := k.WrapKey(ctx, id, dataKey, aad)
	if bytes.Equal(again, wrapped) {
		t.Error("two wraps of one key are identical: nonces repeat")
	}
	got, err := k.UnwrapKey(ctx, id, wrapped, aad)
	if err != nil || !bytes.Equal(got, dataKey) {
		t.Fatalf("UnwrapKey = %x, %v; want %x", got, err, dataKey)
	}
	for name, tc := range map[string]struct {
		id      string
		wrapped []byte
		aad     []byte
	}{
		"wrong aad":       {id, wrapped, []byte("tenant t-acme sandbox s2 artifact memory")},
		"no aad":          {id, wrapped, nil},
		"other key":       {other, wrapped, aad},
		"flipped byte":    {id, flip(wrapped, len(wrapped)/2), aad},
		"flipped version": {id, flip(wrapped, 0), aad},
		"truncated":       {id, wrapped[:len(wrapped)-1], aad},
		"empty":           {id, nil, aad},
		"huge":            {id, make([]byte, kms.MaxWrappedLen+1), aad},
	} {
		_, err := k.UnwrapKey(ctx, tc.id, tc.wrapped, tc.aad)
		if !errors.Is(err, kms.ErrInvalidWrappedKey) || !errdefs.IsFailedPrecondition(err) {
			t.Errorf("%s: err = %v, want ErrInvalidWrappedKey", name, err)
		}
	}
	for _, bad := range [][]byte{nil, make([]byte, kms.MaxDataKeyLen+1)} {
		if _, err := k.WrapKey(ctx, id, bad, aad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("WrapKey of a %d-byte key: %v, want InvalidArgument", len(bad), err)
		}
	}
	if _, err := k.UnwrapKey(ctx, "kek-nope", wrapped, aad); !errors.Is(err, kms.ErrKeyNotFound) || !errdefs.IsNotFound(err) {
		t.Errorf("unknown key: err = %v, want KeyNotFound", err)
	}
	if _, err := k.WrapKey(ctx, "bad id!", dataKey, aad); !errdefs.IsInvalidArgument(err) {
		t.Errorf("malformed key id: err = %v", err)
	}
}

func flip(b []byte, i int) []byte {
	c := slices.Clone(b)
	c[i] ^= 1
	return c
}

func TestRevoke(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	k := open(t, dir)
	id, err := k.CreateKey(ctx, "t-acme")
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := k.WrapKey(ctx, id, make([]byte, 32), nil)
	if err != nil {
		t.Fatal(err)
	}
	material := readMaterial(t, dir, id)
	if len(material) != 32 {
		t.Fatalf("key material is %d bytes, want 32", len(material))
	}
	// A second instance (another process sharing the directory) has the key cached.
	k2 := open(t, dir)
	if _, err := k2.UnwrapKey(ctx, id, wrapped, nil); err != nil {
		t.Fatal(err)
	}
	if err := k.RevokeKey(ctx, id); err != nil {
		t.Fatal(err)
	}
	for name, inst := range map[string]*KMS{"revoker": k, "other instance": k2, "reopened": open(t, dir)} {
		_, err := inst.UnwrapKey(ctx, id, wrapped, nil)
		var re *kms.KeyRevokedError
		if !errors.As(err, &re) || re.KeyID != id || !errors.Is(err, kms.ErrKeyRevoked) || !errdefs.IsFailedPrecondition(err) {
			t.Errorf("%s: unwrap after revoke: err = %v, want KeyRevokedError", name, err)
		}
		if _, err := inst.WrapKey(ctx, id, make([]byte, 32), nil); !errors.Is(err, kms.ErrKeyRevoked) {
			t.Errorf("%s: wrap after revoke: err = %v", name, err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, keyFileName))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString(material))) {
		t.Error("the key file still holds the revoked key's material")
	}
	if m := readMaterial(t, dir, id); m != nil {
		t.Errorf("revoked key still has material %x", m)
	}
	if err := k.RevokeKey(ctx, id); err != nil {
		t.Errorf("second revoke: %v, want success", err)
	}
	if err := k.RevokeKey(ctx, "kek-unknown"); !errors.Is(err, kms.ErrKeyNotFound) {
		t.Errorf("revoke of an unknown key: %v", err)
	}
	keys, err := k.Keys(ctx, "t-acme")
	if err != nil || len(keys) != 1 || keys[0].Active() || keys[0].ID != id {
		t.Errorf("Keys after revoke = %+v, %v", keys, err)
	}
}

func readMaterial(t *testing.T, dir, id string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, keyFileName))
	if err != nil {
		t.Fatal(err)
	}
	var kf keyFile
	if err := json.Unmarshal(raw, &kf); err != nil {
		t.Fatal(err)
	}
	for _, e := range kf.Keys {
		if e.ID == id {
			return e.Material
		}
	}
	t.Fatalf("key %s not in the file", id)
	return nil
}

func TestKeys(t *testing.T) {
	ctx := t.Context()
	k := open(t, t.TempDir())
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	k.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	var want []string
	for range 3 {
		id, err := k.CreateKey(ctx, "t-a")
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	if _, err := k.CreateKey(ctx, "t-b"); err != nil {
		t.Fatal(err)
	}
	keys, err := k.Keys(ctx, "t-a")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, key := range keys {
		got = append(got, key.ID)
		if key.Tenant != "t-a" || !key.Active() || key.Created.IsZero() {
			t.Errorf("key %+v", key)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("Keys(t-a) = %v, want %v (oldest first)", got, want)
	}
	if keys, err := k.Keys(ctx, "t-none"); err != nil || len(keys) != 0 {
		t.Errorf("Keys of a tenant without keys = %v, %v", keys, err)
	}
	for _, bad := range []string{"", "T-A", "a/b", string(make([]byte, 200))} {
		if _, err := k.CreateKey(ctx, bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("CreateKey(%.10q) = %v, want InvalidArgument", bad, err)
		}
	}
}

func TestFileModes(t *testing.T) {
	ctx := t.Context()
	dir := filepath.Join(t.TempDir(), "kms")
	k := open(t, dir)
	if _, err := k.CreateKey(ctx, "t-a"); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, keyFileName): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %#o, want %#o", path, fi.Mode().Perm(), want)
		}
	}
	keyFile := filepath.Join(dir, keyFileName)
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Keys(ctx, "t-a"); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("world-readable key file: err = %v, want FailedPrecondition", err)
	}
	if err := os.Chmod(keyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o757); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("open of a world-writable directory: err = %v, want FailedPrecondition", err)
	}
	if _, err := Open("relative"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("open of a relative path: %v", err)
	}
}

func TestKeyFileHostile(t *testing.T) {
	for name, write := range map[string]func(path string) error{
		"symlink": func(p string) error {
			target := filepath.Join(filepath.Dir(p), "elsewhere")
			if err := os.WriteFile(target, []byte(`{"version":1,"keys":[]}`), 0o600); err != nil {
				return err
			}
			return os.Symlink(target, p)
		},
		"garbage":       func(p string) error { return os.WriteFile(p, []byte("not json"), 0o600) },
		"newer version": func(p string) error { return os.WriteFile(p, []byte(`{"version":2,"keys":[]}`), 0o600) },
		"short material": func(p string) error {
			return os.WriteFile(p, []byte(`{"version":1,"keys":[{"id":"kek-1","tenant":"t","created":"2026-01-01T00:00:00Z","material":"AAAA"}]}`), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := write(filepath.Join(dir, keyFileName)); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(dir); err == nil {
				t.Errorf("Open accepted a %s key file", name)
			}
		})
	}
}

// TestConcurrent creates keys from two instances (two processes' worth) and
// many goroutines at once while others unwrap: no update may be lost.
func TestConcurrent(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	insts := []*KMS{open(t, dir), open(t, dir)}
	base, err := insts[0].CreateKey(ctx, "t-x")
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := insts[0].WrapKey(ctx, base, make([]byte, 32), []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	const perInstance = 8
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for _, inst := range insts {
		for range perInstance {
			wg.Go(func() {
				if _, err := inst.CreateKey(ctx, "t-x"); err != nil {
					errs <- err
				}
			})
		}
		wg.Go(func() {
			for range 50 {
				if _, err := inst.UnwrapKey(ctx, base, wrapped, []byte("a")); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	keys, err := open(t, dir).Keys(ctx, "t-x")
	if err != nil || len(keys) != 1+2*perInstance {
		t.Errorf("after concurrent creates: %d keys, %v; want %d", len(keys), err, 1+2*perInstance)
	}
}

// FuzzParseKeyFile feeds arbitrary bytes to the key file parser: it must not
// panic, and what it accepts must hold its invariants.
func FuzzParseKeyFile(f *testing.F) {
	f.Add([]byte(`{"version":1,"keys":[]}`))
	f.Add([]byte(`{"version":1,"keys":[{"id":"kek-1","tenant":"t-a","created":"2026-01-01T00:00:00Z","material":"` +
		base64.StdEncoding.EncodeToString(make([]byte, 32)) + `"}]}`))
	f.Add([]byte(`{"version":1,"keys":[{"id":"kek-1","tenant":"t-a","created":"2026-01-01T00:00:00Z","revoked":"2026-01-02T00:00:00Z"}]}`))
	f.Add([]byte(`{"version":1,"keys":[{"id":"kek-1","tenant":"t-a"},{"id":"kek-1","tenant":"t-a"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		kf, err := parseKeyFile(data)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, e := range kf.Keys {
			if kms.ValidKeyID(e.ID) != nil || validTenant(e.Tenant) != nil || seen[e.ID] {
				t.Fatalf("accepted bad entry %+v", e)
			}
			seen[e.ID] = true
			if (e.Revoked == nil) != (len(e.Material) == materialLen) {
				t.Fatalf("accepted entry %s with revoked=%v and %d bytes of material", e.ID, e.Revoked != nil, len(e.Material))
			}
		}
	})
}
