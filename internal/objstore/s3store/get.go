package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

// Get opens the object at key. The body is the server's response to one
// GET, so it keeps reading the object that was in place when Get returned;
// if the connection breaks, the read resumes with a ranged GET of that same
// object (If-Match its ETag).
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Info, error) {
	return s.GetRange(ctx, key, 0, -1)
}

// GetRange opens length bytes (-1: to the end) of the object at key from
// offset.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, objstore.Info, error) {
	if err := objstore.ValidKey(key); err != nil {
		return nil, objstore.Info{}, fmt.Errorf("get object: %w", err)
	}
	if offset < 0 || length < -1 {
		return nil, objstore.Info{}, fmt.Errorf("get object %s: range %d+%d: %w", key, offset, length, errdefs.ErrInvalidArgument)
	}
	if length > 0 && offset > math.MaxInt64-length {
		length = -1 // to the end: no object is that long
	}
	if length == 0 {
		// S3 cannot express an empty range.
		return s.emptyRange(ctx, key, offset)
	}
	resp, err := s.open(ctx, key, offset, length, "")
	if err != nil {
		if (offset > 0 || length > 0) && isCode(err, "InvalidRange") {
			// Past the end: empty at the very end, invalid beyond.
			return s.emptyRange(ctx, key, offset)
		}
		return nil, objstore.Info{}, s.classify(ctx, "get object", key, err)
	}
	info, err := s.objectInfo(ctx, key, resp.oi, resp.size)
	if err != nil {
		resp.close()
		return nil, objstore.Info{}, err
	}
	return &bodyReader{s: s, key: key, ctx: ctx, resp: resp, pos: offset, end: offset + resp.oi.Size,
		etag: resp.oi.ETag, idle: s.cfg.ReadIdleTimeout}, info, nil
}

// response is one GET's answer: its body, and what its headers said.
type response struct {
	body   io.ReadCloser
	cancel context.CancelFunc // ends the request
	oi     minio.ObjectInfo   // Size is the length of this body
	size   int64              // the whole object's
}

func (r *response) close() {
	r.body.Close()
	r.cancel()
}

// open issues one GET of length bytes (-1: to the end) from offset, of the
// object with etag when etag is set. The request lives until the response
// is closed; the wait for its headers is bounded by OpTimeout. Errors are
// minio-go's, or ErrUnavailable for an answer that contradicts the request.
func (s *Store) open(ctx context.Context, key string, offset, length int64, etag string) (*response, error) {
	var opts minio.GetObjectOptions
	ranged := offset > 0 || length > 0
	if ranged {
		end := int64(0) // "bytes=offset-"
		if length > 0 {
			end = offset + length - 1
		}
		if err := opts.SetRange(offset, end); err != nil {
			return nil, fmt.Errorf("get object %s: %v: %w", key, err, errdefs.ErrInvalidArgument)
		}
	}
	if etag != "" {
		if err := opts.SetMatchETag(etag); err != nil {
			return nil, err
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	openTimer := time.AfterFunc(s.cfg.OpTimeout, cancel)
	body, oi, hdr, err := s.core.GetObject(rctx, s.cfg.Bucket, s.objectName(key), opts)
	if !openTimer.Stop() && err == nil {
		err = context.DeadlineExceeded
		body.Close()
	}
	if err != nil {
		cancel()
		return nil, err
	}
	r := &response{body: body, cancel: cancel, oi: oi, size: oi.Size}
	if oi.Size < 0 {
		r.close()
		return nil, fmt.Errorf("get object %s: the server sent no Content-Length: %w", key, errdefs.ErrUnavailable)
	}
	if ranged {
		if r.size, err = checkContentRange(hdr.Get("Content-Range"), offset, oi.Size); err != nil {
			r.close()
			return nil, fmt.Errorf("get object %s: %w", key, err)
		}
	}
	r.oi.ETag = strings.Trim(oi.ETag, `"`)
	return r, nil
}

// emptyRange answers a range of no bytes at offset: empty when offset is
// within [0, size], ErrInvalidArgument beyond.
func (s *Store) emptyRange(ctx context.Context, key string, offset int64) (io.ReadCloser, objstore.Info, error) {
	info, err := s.Stat(ctx, key)
	if err != nil {
		return nil, objstore.Info{}, err
	}
	if offset > info.Size {
		return nil, objstore.Info{}, fmt.Errorf("get object %s: offset %d is past the end (%d bytes): %w", key, offset, info.Size, errdefs.ErrInvalidArgument)
	}
	return io.NopCloser(strings.NewReader("")), info, nil
}

// checkContentRange reads the whole object's size from a Content-Range
// header ("bytes first-last/size") and checks that the range starts at
// offset and is n bytes long. The header comes from the server.
func checkContentRange(h string, offset, n int64) (int64, error) {
	bad := fmt.Errorf("server answered Content-Range %.80q for a range from %d: %w", h, offset, errdefs.ErrUnavailable)
	spec, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, bad
	}
	rng, total, ok := strings.Cut(spec, "/")
	if !ok {
		return 0, bad
	}
	first, last, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, bad
	}
	f, err1 := parseUint(first)
	l, err2 := parseUint(last)
	t, err3 := parseUint(total)
	if err1 != nil || err2 != nil || err3 != nil || f != offset || l < f || l >= t || l-f+1 != n {
		return 0, bad
	}
	return t, nil
}

// parseUint reads a non-negative decimal without sign or leading zeros.
func parseUint(s string) (int64, error) {
	if s == "" || len(s) > 1 && s[0] == '0' || s[0] == '+' || s[0] == '-' {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseInt(s, 10, 64)
}

// maxResumes is how many times one body is resumed after a broken
// connection.
const maxResumes = 3

// bodyReader is an object's body. A Read that gets no data for the idle
// timeout fails (the server or the network is stuck); after a transport
// error or a stall the read resumes where it stopped with a ranged GET
// conditional on the object's ETag, up to maxResumes times, so a replaced
// object is never mixed in. Errors it cannot recover from are
// ErrUnavailable, or the caller's context error.
type bodyReader struct {
	s    *Store
	key  string
	ctx  context.Context // the caller's: its error is returned as is
	etag string
	idle time.Duration
	pos  int64 // offset in the object of the next byte
	end  int64 // offset after the last byte to read

	resumes int

	mu      sync.Mutex // guards resp, stalled and timer
	resp    *response
	stalled bool
	timer   *time.Timer
}

func (b *bodyReader) Read(p []byte) (int, error) {
	for {
		n, stalled, err := b.readOnce(p)
		b.pos += int64(n)
		switch {
		case err == nil, errors.Is(err, io.EOF) && !stalled:
			return n, err
		case b.ctx.Err() != nil:
			return n, fmt.Errorf("read object %s: %w", b.key, b.ctx.Err())
		case b.pos >= b.end && !stalled:
			return n, io.EOF // every byte arrived; the connection broke after
		}
		cause := err.Error()
		if stalled {
			cause = fmt.Sprintf("no data from the server for %s", b.idle)
		}
		if b.resumes >= maxResumes || b.etag == "" {
			return n, fmt.Errorf("read object %s at byte %d: %s: %w", b.key, b.pos, cause, errdefs.ErrUnavailable)
		}
		if err := b.resume(cause); err != nil {
			return n, err
		}
		if n > 0 {
			return n, nil
		}
	}
}

// readOnce reads from the current response with the idle watchdog armed.
func (b *bodyReader) readOnce(p []byte) (int, bool, error) {
	b.mu.Lock()
	resp := b.resp
	if b.timer == nil {
		b.timer = time.AfterFunc(b.idle, b.stall)
	} else {
		b.timer.Reset(b.idle)
	}
	b.mu.Unlock()
	n, err := resp.body.Read(p)
	b.mu.Lock()
	b.timer.Stop()
	stalled := b.stalled
	b.stalled = false
	b.mu.Unlock()
	return n, stalled, err
}

// resume replaces the broken response by a GET of the rest of the same
// object, after a short backoff.
func (b *bodyReader) resume(cause string) error {
	b.resumes++
	b.mu.Lock()
	b.resp.close()
	b.mu.Unlock()
	select {
	case <-time.After(time.Duration(b.resumes) * 200 * time.Millisecond):
	case <-b.ctx.Done():
		return fmt.Errorf("read object %s: %w", b.key, b.ctx.Err())
	}
	resp, err := b.s.open(b.ctx, b.key, b.pos, b.end-b.pos, b.etag)
	if err == nil && (resp.oi.ETag != b.etag || resp.oi.Size != b.end-b.pos) {
		resp.close()
		err = fmt.Errorf("the server answered with another object or range")
	}
	if err != nil {
		why := fmt.Sprintf("%v", err)
		if isCode(err, "PreconditionFailed") || isCode(err, "NoSuchKey") {
			why = "the object was replaced or deleted since it was opened"
		}
		if b.ctx.Err() != nil {
			return fmt.Errorf("read object %s: %w", b.key, b.ctx.Err())
		}
		return fmt.Errorf("read object %s at byte %d: %s; resuming failed: %s: %w", b.key, b.pos, cause, why, errdefs.ErrUnavailable)
	}
	b.mu.Lock()
	b.resp = resp
	b.mu.Unlock()
	return nil
}

// stall cancels the request whose Read waited too long.
func (b *bodyReader) stall() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stalled = true
	b.resp.cancel()
}

func (b *bodyReader) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Stop()
	}
	err := b.resp.body.Close()
	b.resp.cancel()
	return err
}
