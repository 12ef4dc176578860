package s3store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

// A digest record (the "sidecar" of a multipart object) is one line:
//
//	space-sha256 v1 <size> sha256:<hex> <etag>\n
//
// It binds the digest to the object's size and ETag, so a record left by
// another version of the object never matches it.
const (
	recordMagic  = "space-sha256 v1"
	maxRecordLen = 512
	maxETagLen   = 256
)

// record is a parsed digest record.
type record struct {
	size   int64
	digest string
	etag   string
}

// marshal renders r as a record line.
func (r record) marshal() []byte {
	return fmt.Appendf(nil, "%s %d %s %s\n", recordMagic, r.size, r.digest, r.etag)
}

// parseRecord reads a record line; the bytes come from the server and are
// checked field by field.
func parseRecord(b []byte) (record, error) {
	bad := func(why string) (record, error) {
		return record{}, fmt.Errorf("digest record: %s: %w", why, errdefs.ErrFailedPrecondition)
	}
	if len(b) > maxRecordLen {
		return bad("too long")
	}
	line, ok := bytes.CutSuffix(b, []byte("\n"))
	if !ok {
		return bad("no final newline")
	}
	rest, ok := strings.CutPrefix(string(line), recordMagic+" ")
	if !ok {
		return bad("unknown format")
	}
	fields := strings.SplitN(rest, " ", 3)
	if len(fields) != 3 {
		return bad("want size, digest and ETag")
	}
	size, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != fields[0] {
		return bad("bad size")
	}
	if !objstore.ValidDigest(fields[1]) {
		return bad("bad digest")
	}
	if !validETag(fields[2]) {
		return bad("bad ETag")
	}
	return record{size: size, digest: fields[1], etag: fields[2]}, nil
}

// validETag accepts 1 to maxETagLen printable ASCII bytes other than space.
func validETag(e string) bool {
	if e == "" || len(e) > maxETagLen {
		return false
	}
	for _, c := range []byte(e) {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// writeRecord stores the digest record of the object at key.
func (s *Store) writeRecord(ctx context.Context, key string, r record) error {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	b := r.marshal()
	d := objstore.NewDigester()
	d.Write(b)
	sum := strings.TrimPrefix(d.Digest(), objstore.DigestPrefix)
	_, err := s.core.PutObject(ctx, s.cfg.Bucket, s.sidecarName(key), bytes.NewReader(b), int64(len(b)), "", sum,
		minio.PutObjectOptions{ContentType: "text/plain", DisableContentSha256: true})
	if err != nil {
		return s.classify(ctx, "write digest record of", key, err)
	}
	return nil
}

// recordedDigest is the digest of the multipart object at key with the given
// ETag and size, or "" when no matching record exists.
func (s *Store) recordedDigest(ctx context.Context, key, etag string, size int64) (string, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	body, _, _, err := s.core.GetObject(ctx, s.cfg.Bucket, s.sidecarName(key), minio.GetObjectOptions{})
	if err != nil {
		if isCode(err, "NoSuchKey") {
			return "", nil
		}
		return "", s.classify(ctx, "read digest record of", key, err)
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, maxRecordLen+1))
	if err != nil {
		return "", s.classify(ctx, "read digest record of", key, err)
	}
	r, err := parseRecord(b)
	if err != nil || r.etag != etag || r.size != size {
		// A stale or foreign record: the object has no known digest.
		return "", nil
	}
	return r.digest, nil
}

// objectInfo describes the object at key from the server's answer, looking
// up the digest record when the object was a multipart upload.
func (s *Store) objectInfo(ctx context.Context, key string, oi minio.ObjectInfo, size int64) (objstore.Info, error) {
	info := objstore.Info{Key: key, Size: size, ModTime: oi.LastModified}
	switch d := oi.UserMetadata[metaDigest]; {
	case objstore.ValidDigest(d):
		info.Digest = d
	case d == metaSidecar:
		digest, err := s.recordedDigest(ctx, key, oi.ETag, size)
		if err != nil {
			return objstore.Info{}, err
		}
		info.Digest = digest
	}
	return info, nil
}
