package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

// abortTimeout bounds the abort of a failed multipart upload, which runs
// even when the caller's context is canceled.
const abortTimeout = 30 * time.Second

// Put streams r to the object at key: a single PUT when the object fits in
// one part, a multipart upload otherwise (see the package comment).
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) (objstore.Info, error) {
	if err := objstore.ValidKey(key); err != nil {
		return objstore.Info{}, fmt.Errorf("put object: %w", err)
	}
	if size < -1 || size > maxObjectSize {
		return objstore.Info{}, fmt.Errorf("put object %s: size %d: want -1 or 0 to 5 TiB: %w", key, size, errdefs.ErrInvalidArgument)
	}
	partSize := s.partSize(size)
	src := &source{r: r, size: size, digest: objstore.NewDigester()}
	if size >= 0 && size <= partSize {
		// Known to fit in one part: read exactly that much, and one byte
		// more to catch a reader that is longer than announced.
		buf := make([]byte, size+1)
		n, err := src.fill(ctx, key, buf)
		if err != nil {
			return objstore.Info{}, err
		}
		return s.putSingle(ctx, key, buf[:n], src)
	}
	bufp := s.getPart(partSize)
	n, err := src.fill(ctx, key, *bufp)
	if err != nil {
		s.putPart(bufp)
		return objstore.Info{}, err
	}
	if src.eof {
		defer s.putPart(bufp)
		return s.putSingle(ctx, key, (*bufp)[:n], src)
	}
	return s.putMultipart(ctx, key, src, bufp, n, partSize)
}

// partSize is the part size for an object of size bytes (-1: unknown):
// Config.PartSize, or more when that would take more than maxParts parts.
func (s *Store) partSize(size int64) int64 {
	p := s.cfg.PartSize
	if size > p*maxParts {
		p = (size + maxParts - 1) / maxParts
		p = (p + 1<<20 - 1) &^ (1<<20 - 1) // round up to a MiB
	}
	return p
}

func (s *Store) getPart(size int64) *[]byte {
	if size == s.cfg.PartSize {
		return s.parts.Get().(*[]byte)
	}
	b := make([]byte, size)
	return &b
}

func (s *Store) putPart(b *[]byte) {
	if int64(len(*b)) == s.cfg.PartSize {
		s.parts.Put(b)
	}
}

// source reads the object's bytes from the caller's reader, hashing them
// and checking them against the announced size.
type source struct {
	r      io.Reader
	size   int64 // announced, or -1
	n      int64 // read so far
	digest *objstore.Digester
	eof    bool
}

// fill reads into buf until it is full or the reader ends. Past the
// announced size (or at its end, short of it) it fails with
// ErrInvalidArgument; a reader error is wrapped as it is.
func (src *source) fill(ctx context.Context, key string, buf []byte) (int, error) {
	n := 0
	for n < len(buf) && !src.eof {
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("put object %s: %w", key, err)
		}
		k, err := src.r.Read(buf[n:])
		if k < 0 || k > len(buf)-n {
			return n, fmt.Errorf("put object %s: reader returned %d bytes for a %d-byte buffer: %w", key, k, len(buf)-n, errdefs.ErrInvalidArgument)
		}
		src.digest.Write(buf[n : n+k])
		n += k
		src.n += int64(k)
		if src.size >= 0 && src.n > src.size {
			return n, fmt.Errorf("put object %s: the reader yields more than the announced %d bytes: %w", key, src.size, errdefs.ErrInvalidArgument)
		}
		switch {
		case errors.Is(err, io.EOF):
			src.eof = true
		case err != nil:
			return n, fmt.Errorf("put object %s: read source after %d bytes: %w", key, src.n, err)
		}
	}
	if src.eof && src.size >= 0 && src.n != src.size {
		return n, fmt.Errorf("put object %s: the reader yields %d bytes, not the announced %d: %w", key, src.n, src.size, errdefs.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return n, fmt.Errorf("put object %s: %w", key, err)
	}
	return n, nil
}

// info is what a successful Put returns.
func (src *source) info(key string) objstore.Info {
	return objstore.Info{Key: key, Size: src.n, Digest: src.digest.Digest(), ModTime: time.Now()}
}

// putSingle stores a whole object that is in memory with one PUT, its
// digest in the user metadata and as the signed payload hash.
func (s *Store) putSingle(ctx context.Context, key string, data []byte, src *source) (objstore.Info, error) {
	info := src.info(key)
	opCtx, cancel := s.opContext(ctx)
	defer cancel()
	_, err := s.core.PutObject(opCtx, s.cfg.Bucket, s.objectName(key), bytes.NewReader(data), int64(len(data)), "",
		strings.TrimPrefix(info.Digest, objstore.DigestPrefix), minio.PutObjectOptions{
			UserMetadata:         map[string]string{metaDigest: info.Digest},
			ContentType:          "application/octet-stream",
			DisableContentSha256: true,
		})
	if err != nil {
		return objstore.Info{}, s.classify(ctx, "put object", key, err)
	}
	return info, nil
}

// upload is one multipart upload in progress.
type upload struct {
	s        *Store
	key, id  string
	partSize int64

	mu    sync.Mutex // guards parts
	parts []minio.CompletePart
}

// putMultipart streams the rest of src as a multipart upload whose first
// part (n bytes) is already in first. It aborts the upload on any failure.
func (s *Store) putMultipart(ctx context.Context, key string, src *source, first *[]byte, n int, partSize int64) (objstore.Info, error) {
	opCtx, cancel := s.opContext(ctx)
	id, err := s.core.NewMultipartUpload(opCtx, s.cfg.Bucket, s.objectName(key), minio.PutObjectOptions{
		UserMetadata: map[string]string{metaDigest: metaSidecar},
		ContentType:  "application/octet-stream",
	})
	cancel()
	if err != nil {
		s.putPart(first)
		return objstore.Info{}, s.classify(ctx, "put object", key, err)
	}
	up := &upload{s: s, key: key, id: id, partSize: partSize}
	if err := up.send(ctx, src, first, n); err != nil {
		up.abort(ctx)
		return objstore.Info{}, err
	}
	etag, err := up.complete(ctx)
	if err != nil {
		up.abort(ctx)
		return objstore.Info{}, err
	}
	info := src.info(key)
	// The object is complete and visible: a failure to write its record
	// only leaves it without a recorded digest (Verify still works), so it
	// does not fail the Put, which must not report an error for an object
	// it made visible.
	_ = s.writeRecord(ctx, key, record{size: info.Size, digest: info.Digest, etag: etag})
	return info, nil
}

// send uploads the parts: the first one given (n bytes in first), then the
// rest of src, with at most Config.Concurrency parts in flight and one more
// being read.
func (up *upload) send(ctx context.Context, src *source, first *[]byte, n int) error {
	conc := up.s.cfg.Concurrency
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(conc)
	free := make(chan *[]byte, conc+1) // buffers; nil ones are allocated on first use
	for range conc {
		free <- nil
	}
	buf := first
	var readErr error
	for part := 1; ; part++ {
		b, data := buf, (*buf)[:n]
		g.Go(func() error {
			defer func() { free <- b }()
			return up.sendPart(gctx, part, data)
		})
		if src.eof {
			break
		}
		if buf, n, readErr = up.next(gctx, src, free); buf == nil {
			break
		}
		if part == maxParts {
			free <- buf
			readErr = fmt.Errorf("put object %s: more than %d parts of %d MiB: pass the size or raise part_size: %w",
				up.key, maxParts, up.partSize>>20, errdefs.ErrInvalidArgument)
			break
		}
	}
	err := g.Wait()
	for range len(free) {
		if b := <-free; b != nil {
			up.s.putPart(b)
		}
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("put object %s: %w", up.key, ctx.Err())
	case readErr != nil && !errors.Is(readErr, context.Canceled):
		return readErr // the source's own error, or a size mismatch
	case err != nil:
		return err // a part upload failed (and canceled the reading)
	}
	return readErr
}

// next waits for a free buffer and fills it with the next part. It returns
// a nil buffer when the stream ended on a part boundary or on error.
func (up *upload) next(ctx context.Context, src *source, free chan *[]byte) (*[]byte, int, error) {
	var buf *[]byte
	select {
	case buf = <-free:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	if buf == nil {
		buf = up.s.getPart(up.partSize)
	}
	n, err := src.fill(ctx, up.key, *buf)
	if err != nil || n == 0 {
		free <- buf
		return nil, 0, err
	}
	return buf, n, nil
}

// sendPart uploads one part, its SHA-256 as the signed payload hash so the
// server checks what arrived.
func (up *upload) sendPart(ctx context.Context, number int, data []byte) error {
	sum := sha256.Sum256(data)
	pctx, cancel := up.s.opContext(ctx)
	defer cancel()
	p, err := up.s.core.PutObjectPart(pctx, up.s.cfg.Bucket, up.s.objectName(up.key), up.id, number,
		bytes.NewReader(data), int64(len(data)), minio.PutObjectPartOptions{
			Sha256Hex:            hex.EncodeToString(sum[:]),
			DisableContentSha256: true,
		})
	if err != nil {
		return up.s.classify(ctx, fmt.Sprintf("put object (part %d of upload to)", number), up.key, err)
	}
	up.mu.Lock()
	up.parts = append(up.parts, minio.CompletePart{PartNumber: number, ETag: p.ETag})
	up.mu.Unlock()
	return nil
}

// complete commits the upload and returns the object's ETag.
func (up *upload) complete(ctx context.Context) (string, error) {
	up.mu.Lock()
	parts := slices.Clone(up.parts)
	up.mu.Unlock()
	slices.SortFunc(parts, func(a, b minio.CompletePart) int { return a.PartNumber - b.PartNumber })
	opCtx, cancel := up.s.opContext(ctx)
	defer cancel()
	res, err := up.s.core.CompleteMultipartUpload(opCtx, up.s.cfg.Bucket, up.s.objectName(up.key), up.id, parts, minio.PutObjectOptions{})
	if err != nil {
		return "", up.s.classify(ctx, "put object (complete upload to)", up.key, err)
	}
	return strings.Trim(res.ETag, `"`), nil
}

// abort discards the upload's parts. It runs even when ctx is canceled; if
// the server cannot be reached, the incomplete upload stays until a bucket
// lifecycle rule removes it.
func (up *upload) abort(ctx context.Context) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	_ = up.s.core.AbortMultipartUpload(actx, up.s.cfg.Bucket, up.s.objectName(up.key), up.id)
}
