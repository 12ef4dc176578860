// Package localstore is the local-file credentials.Backend: every credential
// lives in one file encrypted with AES-256-GCM under a 256-bit key read from
// a separate key file (mode 0600, 64 hex digits; GenerateKeyFile makes one).
//
// The file is the source of truth: every call reads and authenticates it, so
// several processes may share it, and a change is serialised across them by
// flock on PATH.lock and written atomically (temporary file in the same
// directory, fsync, rename, fsync of the directory). Neither the store, its
// lock nor the key file is opened through a symbolic link. Any alteration of
// the store is detected by GCM and refused; a store written under another
// key is refused with a message saying so.
//
// Plaintext buffers are zeroed after use and secrets of credentials not
// handed out are cleared; Go's JSON decoder and the garbage collector may
// still leave copies in freed memory, so this is best effort. Reading the
// whole file per call is fine for the hundreds of credentials a node holds;
// a cache keyed on the file's identity is the next step if it is not.
package localstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/seal"
)

// Store is a credentials.Backend over one encrypted file. It is safe for
// concurrent use, also by several processes sharing the file.
type Store struct {
	path   string
	sealer *seal.Sealer
	fp     []byte
	mu     sync.Mutex // serialises this process's calls; flock serialises processes
}

var _ credentials.Backend = (*Store)(nil)

// Open returns a Store over the file at path (created on the first Put),
// encrypted under the key in keyPath. An existing store is read once to
// check that the key fits it.
func Open(path, keyPath string) (*Store, error) {
	key, err := readKeyFile(keyPath)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	sealer, err := seal.New(key)
	if err != nil {
		return nil, fmt.Errorf("credential store %s: %w", path, err)
	}
	s := &Store{path: path, sealer: sealer, fp: fingerprint(key)}
	if err := s.view(func(*document) {}); err != nil {
		return nil, err
	}
	return s, nil
}

// Put implements credentials.Backend.
func (s *Store) Put(ctx context.Context, c credentials.Credential) error {
	if err := c.Validate(); err != nil {
		return err
	}
	return s.update(func(doc *document) error {
		i := slices.IndexFunc(doc.Credentials, func(r record) bool { return r.ID == c.ID })
		if i < 0 {
			doc.Credentials = append(doc.Credentials, toRecord(&c))
			return nil
		}
		clear(doc.Credentials[i].Secret)
		if old := doc.Credentials[i].Scope; old != c.Scope {
			return fmt.Errorf("credential %s exists in scope %s, not %s; delete it first: %w", c.ID, old, c.Scope, errdefs.ErrConflict)
		}
		doc.Credentials[i] = toRecord(&c)
		return nil
	})
}

// Delete implements credentials.Backend.
func (s *Store) Delete(ctx context.Context, id string) error {
	return s.update(func(doc *document) error {
		i := slices.IndexFunc(doc.Credentials, func(r record) bool { return r.ID == id })
		if i < 0 {
			return fmt.Errorf("credential %.128s: %w", id, errdefs.ErrNotFound)
		}
		clear(doc.Credentials[i].Secret)
		doc.Credentials = slices.Delete(doc.Credentials, i, i+1)
		return nil
	})
}

// Get implements credentials.Backend.
func (s *Store) Get(ctx context.Context, id string) (*credentials.Credential, error) {
	var out *credentials.Credential
	err := s.view(func(doc *document) {
		for i := range doc.Credentials {
			if doc.Credentials[i].ID == id {
				c := doc.Credentials[i].credential()
				cl := c.Clone()
				out = &cl
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		return nil, fmt.Errorf("credential %.128s: %w", id, errdefs.ErrNotFound)
	}
	return out, nil
}

// List implements credentials.Backend.
func (s *Store) List(ctx context.Context, scope credentials.Scope) ([]credentials.Credential, error) {
	var out []credentials.Credential
	err := s.view(func(doc *document) {
		for i := range doc.Credentials {
			if doc.Credentials[i].Scope == scope {
				c := doc.Credentials[i].credential()
				out = append(out, c.Clone())
			}
		}
	})
	slices.SortFunc(out, func(a, b credentials.Credential) int { return strings.Compare(a.ID, b.ID) })
	return out, err
}

// view runs fn over the current document under a shared lock.
func (s *Store) view(fn func(*document)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := s.lock(unix.LOCK_SH)
	if err != nil {
		return err
	}
	defer unlock()
	doc, err := s.load()
	if err != nil {
		return err
	}
	defer doc.zero()
	fn(doc)
	return nil
}

// update runs fn over the current document under an exclusive lock and
// writes the result back.
func (s *Store) update(fn func(*document) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	unlock, err := s.lock(unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	doc, err := s.load()
	if err != nil {
		return err
	}
	defer doc.zero()
	if err := fn(doc); err != nil {
		return err
	}
	return s.save(doc)
}

// lock takes flock on PATH.lock.
func (s *Store) lock(how int) (func(), error) {
	path := s.path + ".lock"
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("credential store lock %s: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	if err := unix.Flock(fd, how); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("credential store lock %s: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	return func() { unix.Close(fd) }, nil
}

// load reads, authenticates and decodes the store; a missing file is empty.
func (s *Store) load() (*document, error) {
	data, err := seal.ReadPrivateFile(s.path, maxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("credential store: %w", err)
	}
	if data == nil {
		return &document{Version: docVersion}, nil
	}
	plain, err := openDoc(s.sealer, s.fp, data)
	if err != nil {
		return nil, fmt.Errorf("credential store %s: %w", s.path, err)
	}
	defer clear(plain)
	doc, err := decodeDocument(plain)
	if err != nil {
		return nil, fmt.Errorf("credential store %s: %w", s.path, err)
	}
	return doc, nil
}

// save encrypts doc and replaces the store file atomically and durably.
func (s *Store) save(doc *document) error {
	plain, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("credential store %s: encode: %w", s.path, err)
	}
	defer clear(plain)
	if err := seal.WritePrivateFile(s.path, sealDoc(s.sealer, s.fp, plain)); err != nil {
		return fmt.Errorf("credential store: %w", err)
	}
	return nil
}
