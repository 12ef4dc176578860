// Package localkms is the local-file provider of kms.KMS: tenants' 256-bit
// key-encryption keys live in DIR/keys.json (mode 0600, directory 0700),
// and wrapping is AES-256-GCM under the tenant's key with the caller's aad
// and the key id bound in.
//
// The file is the source of truth, re-checked on every call (a stat, and a
// re-read when another process replaced it), so several processes may share
// one directory and a revocation made by one is obeyed by all from their next
// call. Changes are serialised across processes by flock on DIR/keys.lock
// and written atomically (temporary file, fsync, rename, fsync).
//
// Revoking a key deletes its material from the file and keeps its id as
// revoked, so later unwraps fail with a clear *kms.KeyRevokedError rather
// than "not found". The old file's blocks are released to the filesystem,
// not overwritten: on a journaling or copy-on-write filesystem the old bytes
// may survive in free space until reused, so the directory belongs on a
// filesystem the operator trusts (or on encrypted storage).
//
// With an Auditor (SetAuditor; the server's is DATA/kms-audit.log) every
// wrap and unwrap is recorded before it answers, and refused when it cannot
// be recorded.
package localkms

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/kms"
	"github.com/spacesandbox/space/internal/seal"
)

// wrapVersion is the first byte of every wrapped key.
const (
	wrapVersion = 1
	wrapAADTag  = "space-localkms-v1"
)

// KMS is a kms.KMS over a key directory. It is safe for concurrent use, also
// by several processes sharing the directory.
type KMS struct {
	dir string

	mu       sync.Mutex // guards cache, cacheSum and audit
	audit    Auditor    // records every key use first; nil: none
	cache    map[string]*entry
	cacheSum [sha256.Size]byte // of the key file bytes the cache was built from
	now      func() time.Time
}

// entry is a cached key: its sealer while active.
type entry struct {
	fileEntry
	sealer *seal.Sealer // nil once revoked
}

// Key describes a tenant key, never its material.
type Key struct {
	// ID names the key in WrapKey and UnwrapKey.
	ID string
	// Tenant owns the key.
	Tenant string
	// Created is when the key was made.
	Created time.Time
	// RevokedAt is when the key was revoked; zero while it is active.
	RevokedAt time.Time
}

// Active reports whether the key can still wrap and unwrap.
func (k Key) Active() bool { return k.RevokedAt.IsZero() }

var _ kms.KMS = (*KMS)(nil)

// Open opens the key directory dir (an absolute path), creating it with mode
// 0700 when missing, and checks its key file. A directory others can write
// is refused, and so is a key file others can read.
func Open(dir string) (*KMS, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("key directory %q: want an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("key directory %s: create: %w: %w", dir, err, errdefs.ErrUnavailable)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("key directory %s: %w: %w", dir, err, errdefs.ErrUnavailable)
	}
	// Others who can write the directory can swap the key file for their
	// own; reading it only shows file names (the key file itself is 0600).
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("key directory %s: mode %#o lets others replace the key file; run chmod 700 on it: %w",
			dir, fi.Mode().Perm(), errdefs.ErrFailedPrecondition)
	}
	k := &KMS{dir: dir, now: time.Now}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.refreshLocked(); err != nil {
		return nil, err
	}
	return k, nil
}

// refreshLocked reads keys.json and rebuilds the cache when its bytes
// changed. Reading a small file on every call is what lets a revocation by
// another process take effect at once; parsing and key setup are skipped
// while the bytes stay the same. k.mu is held.
func (k *KMS) refreshLocked() error {
	data, err := readKeyFile(k.dir)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	if k.cache != nil && sum == k.cacheSum {
		clear(data)
		return nil
	}
	kf, err := parseKeyFile(data)
	clear(data)
	if err != nil {
		return fmt.Errorf("key file in %s: %w: %w", k.dir, err, errdefs.ErrFailedPrecondition)
	}
	return k.installLocked(kf, sum)
}

// installLocked replaces the cache with kf, building each active key's AEAD
// and wiping the previous cache's material. k.mu is held.
func (k *KMS) installLocked(kf *keyFile, sum [sha256.Size]byte) error {
	cache := make(map[string]*entry, len(kf.Keys))
	for _, fe := range kf.Keys {
		e := &entry{fileEntry: fe}
		if fe.Revoked == nil {
			var err error
			if e.sealer, err = seal.New(fe.Material); err != nil {
				return fmt.Errorf("key %s: %w: %w", fe.ID, err, errdefs.ErrFailedPrecondition)
			}
		}
		cache[fe.ID] = e
	}
	for _, old := range k.cache {
		clear(old.Material)
	}
	k.cache, k.cacheSum = cache, sum
	return nil
}

// sealer returns the sealer of an active key and its tenant, or the error
// that explains why there is none.
func (k *KMS) sealer(keyID string) (*seal.Sealer, string, error) {
	if err := kms.ValidKeyID(keyID); err != nil {
		return nil, "", err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.refreshLocked(); err != nil {
		return nil, "", err
	}
	e, ok := k.cache[keyID]
	switch {
	case !ok:
		return nil, "", &kms.KeyNotFoundError{KeyID: keyID}
	case e.sealer == nil:
		return nil, "", &kms.KeyRevokedError{KeyID: keyID}
	}
	return e.sealer, e.Tenant, nil
}

// wrapAAD binds the key id and the caller's aad; the key id is validated and
// holds no NUL, so the encoding is unambiguous.
func wrapAAD(keyID string, aad []byte) []byte {
	out := make([]byte, 0, len(wrapAADTag)+len(keyID)+2+len(aad))
	out = append(out, wrapAADTag...)
	out = append(out, 0)
	out = append(out, keyID...)
	out = append(out, 0)
	return append(out, aad...)
}

// WrapKey encrypts dataKey under keyID: version byte, then seal.Sealer.Seal's
// 12-byte random nonce, AES-256-GCM ciphertext and tag.
func (k *KMS) WrapKey(ctx context.Context, keyID string, dataKey, aad []byte) ([]byte, error) {
	if len(dataKey) == 0 || len(dataKey) > kms.MaxDataKeyLen {
		return nil, fmt.Errorf("wrap with key %s: data key of %d bytes, want 1 to %d: %w", keyID, len(dataKey), kms.MaxDataKeyLen, errdefs.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sealer, tenant, err := k.sealer(keyID)
	if err != nil {
		return nil, fmt.Errorf("wrap with key %s: %w", keyID, err)
	}
	if err := k.record(ctx, "wrap", keyID, tenant); err != nil {
		return nil, err
	}
	out := make([]byte, 1, 1+len(dataKey)+sealer.Overhead())
	out[0] = wrapVersion
	return sealer.Seal(out, dataKey, wrapAAD(keyID, aad)), nil
}

// UnwrapKey decrypts a key WrapKey made under keyID with the same aad.
func (k *KMS) UnwrapKey(ctx context.Context, keyID string, wrapped, aad []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sealer, tenant, err := k.sealer(keyID)
	if err != nil {
		return nil, fmt.Errorf("unwrap with key %s: %w", keyID, err)
	}
	if err := k.record(ctx, "unwrap", keyID, tenant); err != nil {
		return nil, err
	}
	if len(wrapped) > kms.MaxWrappedLen || len(wrapped) < 1+sealer.Overhead()+1 || wrapped[0] != wrapVersion {
		return nil, fmt.Errorf("unwrap with key %s: malformed wrapped key (%d bytes): %w", keyID, len(wrapped), kms.ErrInvalidWrappedKey)
	}
	key, err := sealer.Open(wrapped[1:], wrapAAD(keyID, aad))
	if err != nil {
		return nil, fmt.Errorf("unwrap with key %s: %w", keyID, kms.ErrInvalidWrappedKey)
	}
	return key, nil
}

// CreateKey makes a new random 256-bit key for tenant and returns its id.
func (k *KMS) CreateKey(ctx context.Context, tenant string) (string, error) {
	if err := validTenant(tenant); err != nil {
		return "", fmt.Errorf("create key: %w", err)
	}
	material := make([]byte, materialLen)
	rand.Read(material)
	id := newKeyID()
	err := k.update(ctx, func(kf *keyFile) error {
		kf.Keys = append(kf.Keys, fileEntry{ID: id, Tenant: tenant, Created: k.now().UTC(), Material: material})
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("create key for tenant %s: %w", tenant, err)
	}
	return id, nil
}

// RevokeKey destroys the material of keyID and remembers the id as revoked.
// Revoking a revoked key succeeds; an unknown key is a *kms.KeyNotFoundError.
func (k *KMS) RevokeKey(ctx context.Context, keyID string) error {
	if err := kms.ValidKeyID(keyID); err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	err := k.update(ctx, func(kf *keyFile) error {
		i := slices.IndexFunc(kf.Keys, func(e fileEntry) bool { return e.ID == keyID })
		if i < 0 {
			return &kms.KeyNotFoundError{KeyID: keyID}
		}
		e := &kf.Keys[i]
		if e.Revoked == nil {
			now := k.now().UTC()
			e.Revoked = &now
			clear(e.Material)
			e.Material = nil
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("revoke key %s: %w", keyID, err)
	}
	return nil
}

// Keys lists tenant's keys, active and revoked, oldest first.
func (k *KMS) Keys(ctx context.Context, tenant string) ([]Key, error) {
	if err := validTenant(tenant); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.refreshLocked(); err != nil {
		return nil, fmt.Errorf("list keys of tenant %s: %w", tenant, err)
	}
	var out []Key
	for _, e := range k.cache {
		if e.Tenant != tenant {
			continue
		}
		key := Key{ID: e.ID, Tenant: e.Tenant, Created: e.Created}
		if e.Revoked != nil {
			key.RevokedAt = *e.Revoked
		}
		out = append(out, key)
	}
	slices.SortFunc(out, func(a, b Key) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// update applies change to the current key file under the directory's lock
// and writes the result.
func (k *KMS) update(ctx context.Context, change func(*keyFile) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	unlock, err := k.lock()
	if err != nil {
		return err
	}
	defer unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	data, err := readKeyFile(k.dir)
	if err != nil {
		return err
	}
	kf, err := parseKeyFile(data)
	clear(data)
	if err != nil {
		return fmt.Errorf("key file in %s: %w: %w", k.dir, err, errdefs.ErrFailedPrecondition)
	}
	defer func() {
		for i := range kf.Keys {
			clear(kf.Keys[i].Material)
		}
	}()
	if err := change(kf); err != nil {
		return err
	}
	if err := writeKeyFile(k.dir, kf); err != nil {
		return err
	}
	// Re-read rather than trust kf: the cache must hold what the file holds.
	return k.refreshLocked()
}

// lock takes the directory's exclusive lock, shared with other processes.
func (k *KMS) lock() (func(), error) {
	path := filepath.Join(k.dir, lockFileName)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("key directory %s: open lock: %w: %w", k.dir, err, errdefs.ErrUnavailable)
	}
	for {
		err = unix.Flock(fd, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("key directory %s: lock: %w: %w", k.dir, err, errdefs.ErrUnavailable)
	}
	return func() { unix.Close(fd) }, nil
}
