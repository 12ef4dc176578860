// Package objstore owns the object storage contract: named, immutable blobs
// (hibernated memory images, filesystem deltas, manifests) written by
// streaming and read back whole or by range.
//
// The guarantees every driver gives (objstoretest checks them):
//
//   - Put streams: it never holds a whole object in memory, and it returns the
//     size and SHA-256 digest of what it stored.
//   - Atomic visibility: a reader sees either the previous object under a key
//     or the complete new one, never a partial write. A Put that fails or
//     whose process dies leaves no object behind; concurrent Puts of one key
//     end with exactly one complete object (the last to finish).
//   - Errors carry an errdefs class: a missing object is ErrNotFound, a bad
//     key ErrInvalidArgument, a store that cannot be reached or written
//     ErrUnavailable (retry later).
//
// Drivers are chosen by URL with Open: file:///abs/path is objstore/filestore,
// s3://bucket/prefix is objstore/s3store (see Open).
package objstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Store holds objects under validated keys (see ValidKey). Every method is
// safe for concurrent use.
type Store interface {
	// Put stores the bytes of r under key, replacing any object there once
	// the new one is complete. size is the exact length r will produce, or -1
	// when unknown; a reader that produces a different length fails the Put
	// with ErrInvalidArgument. An error from r is wrapped (errors.Is finds
	// it). On any error no new object is visible.
	Put(ctx context.Context, key string, r io.Reader, size int64) (Info, error)
	// Get opens the object at key for reading. The reader keeps reading the
	// object that existed when Get returned even if it is replaced meanwhile.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)
	// GetRange opens length bytes of the object at key starting at offset;
	// length -1 reads to the end and a range past the end is cut short. An
	// offset outside [0, size] is ErrInvalidArgument. Info describes the
	// whole object.
	GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, Info, error)
	// Stat describes the object at key.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the object at key. A missing object is not an error.
	Delete(ctx context.Context, key string) error
	// List describes every object whose key starts with prefix (a plain
	// string prefix, as in S3: "a" matches "a", "a/b" and "ab"), sorted by
	// key. The empty prefix lists everything.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Close releases the store's resources.
	Close() error
}

// Info describes one stored object.
type Info struct {
	// Key is the object's key.
	Key string
	// Size is the object's length in bytes.
	Size int64
	// Digest is "sha256:" and the hex SHA-256 of the object's bytes. Put
	// always sets it; Get, Stat and List set it when the driver recorded it
	// at Put time (filestore records it in an extended attribute and leaves
	// it empty on a filesystem without user xattrs). Verify checks the bytes
	// themselves.
	Digest string
	// ModTime is when the object was stored.
	ModTime time.Time
}

// DigestPrefix starts every Digest.
const DigestPrefix = "sha256:"

// FormatDigest renders a SHA-256 sum as a Digest string.
func FormatDigest(sum []byte) string { return DigestPrefix + hex.EncodeToString(sum) }

// ValidDigest reports whether s has the shape of a Digest.
func ValidDigest(s string) bool {
	hexPart, ok := strings.CutPrefix(s, DigestPrefix)
	if !ok || len(hexPart) != 2*sha256.Size {
		return false
	}
	for _, c := range []byte(hexPart) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Digester is an io.Writer that counts and hashes what it is given: drivers
// and callers tee a stream into it to learn its Size and Digest.
type Digester struct {
	h hash.Hash
	n int64
}

// NewDigester returns an empty Digester.
func NewDigester() *Digester { return &Digester{h: sha256.New()} }

// Write hashes p; it never fails.
func (d *Digester) Write(p []byte) (int, error) {
	d.h.Write(p)
	d.n += int64(len(p))
	return len(p), nil
}

// Size is the number of bytes written so far.
func (d *Digester) Size() int64 { return d.n }

// Digest is the digest of the bytes written so far.
func (d *Digester) Digest() string { return FormatDigest(d.h.Sum(nil)) }

// Verify reads the whole object at key and checks it against want's Size
// and Digest: it is how a caller makes sure an artifact arrived intact
// without trusting metadata. A mismatch is ErrFailedPrecondition.
func Verify(ctx context.Context, s Store, key string, want Info) error {
	if !ValidDigest(want.Digest) {
		return fmt.Errorf("verify object %s: want digest %q: %w", key, want.Digest, errdefs.ErrInvalidArgument)
	}
	rc, info, err := s.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("verify object %s: %w", key, err)
	}
	defer rc.Close()
	if info.Size != want.Size {
		return fmt.Errorf("verify object %s: size %d, want %d: %w", key, info.Size, want.Size, errdefs.ErrFailedPrecondition)
	}
	d := NewDigester()
	if _, err := io.Copy(d, ctxReader{ctx, rc}); err != nil {
		return fmt.Errorf("verify object %s: read: %w", key, err)
	}
	if d.Size() != want.Size || d.Digest() != want.Digest {
		return fmt.Errorf("verify object %s: content is %d bytes %s, want %d bytes %s: %w",
			key, d.Size(), d.Digest(), want.Size, want.Digest, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
