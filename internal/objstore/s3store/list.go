package s3store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/spacesandbox/space/internal/objstore"
)

// statConcurrency is the number of HEAD requests List has in flight.
const statConcurrency = 8

// Stat describes the object at key with a HEAD request (and, for a
// multipart object, a read of its digest record).
func (s *Store) Stat(ctx context.Context, key string) (objstore.Info, error) {
	if err := objstore.ValidKey(key); err != nil {
		return objstore.Info{}, fmt.Errorf("stat object: %w", err)
	}
	opCtx, cancel := s.opContext(ctx)
	defer cancel()
	oi, err := s.core.StatObject(opCtx, s.cfg.Bucket, s.objectName(key), minio.StatObjectOptions{})
	if err != nil {
		return objstore.Info{}, s.classify(ctx, "stat object", key, err)
	}
	return s.objectInfo(ctx, key, oi, oi.Size)
}

// Delete removes the object at key, then its digest record if it has one.
// S3 answers a delete of a missing object with success.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidKey(key); err != nil {
		return fmt.Errorf("delete object: %w", err)
	}
	opCtx, cancel := s.opContext(ctx)
	defer cancel()
	for _, name := range []string{s.objectName(key), s.sidecarName(key)} {
		err := s.core.RemoveObject(opCtx, s.cfg.Bucket, name, minio.RemoveObjectOptions{})
		if err != nil && !isCode(err, "NoSuchKey") {
			return s.classify(ctx, "delete object", key, err)
		}
	}
	return nil
}

// List describes the objects whose keys start with prefix, sorted by key.
// A listing does not carry user metadata, so List asks for each object's
// digest as Stat does (statConcurrency at a time); an object replaced or
// deleted meanwhile keeps what the listing said, without a digest.
func (s *Store) List(ctx context.Context, prefix string) ([]objstore.Info, error) {
	if err := objstore.ValidPrefix(prefix); err != nil {
		return nil, err
	}
	type entry struct {
		info objstore.Info
		etag string
	}
	var entries []entry
	opCtx, cancel := s.opContext(ctx)
	defer cancel()
	for oi := range s.core.ListObjectsIter(opCtx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.root + prefix, Recursive: true}) {
		if oi.Err != nil {
			return nil, s.classify(ctx, "list objects under", prefix, oi.Err)
		}
		key, ok := s.keyOf(oi.Key)
		if !ok || !strings.HasPrefix(key, prefix) {
			continue // a digest record, or not an object of this store
		}
		entries = append(entries, entry{objstore.Info{Key: key, Size: oi.Size, ModTime: oi.LastModified}, strings.Trim(oi.ETag, `"`)})
	}
	// S3 sorts by name, and the "@" suffix orders "a/b@" after "a/b/c@":
	// sort by key.
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.info.Key, b.info.Key) })

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(statConcurrency)
	for i := range entries {
		g.Go(func() error {
			digest, err := s.digestOf(gctx, entries[i].info.Key, entries[i].etag, entries[i].info.Size)
			entries[i].info.Digest = digest
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	infos := make([]objstore.Info, len(entries))
	for i, e := range entries {
		infos[i] = e.info
	}
	return infos, nil
}

// digestOf is the recorded digest of the object at key if it still has the
// listed ETag and size, else "".
func (s *Store) digestOf(ctx context.Context, key, etag string, size int64) (string, error) {
	opCtx, cancel := s.opContext(ctx)
	defer cancel()
	oi, err := s.core.StatObject(opCtx, s.cfg.Bucket, s.objectName(key), minio.StatObjectOptions{})
	switch {
	case isCode(err, "NoSuchKey"):
		return "", nil // deleted since the listing
	case err != nil:
		return "", s.classify(ctx, "stat object", key, err)
	case strings.Trim(oi.ETag, `"`) != etag || oi.Size != size:
		return "", nil // replaced since the listing
	}
	info, err := s.objectInfo(ctx, key, oi, size)
	return info.Digest, err
}
