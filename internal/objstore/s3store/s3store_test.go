package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/objstore/objstoretest"
	"github.com/spacesandbox/space/internal/objstore/s3store"
	"github.com/spacesandbox/space/internal/objstore/s3store/s3test"
)

// config is a Config for srv's bucket under prefix.
func config(srv *s3test.Server, prefix string) s3store.Config {
	return s3store.Config{
		Bucket:    srv.Bucket,
		Prefix:    prefix,
		Endpoint:  srv.Endpoint,
		Insecure:  true,
		AccessKey: srv.AccessKey,
		SecretKey: srv.SecretKey,
	}
}

func open(t testing.TB, cfg s3store.Config) *s3store.Store {
	t.Helper()
	s, err := s3store.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the objstore suite with a fresh prefix per subtest,
// all in one bucket.
func TestConformance(t *testing.T) {
	srv := s3test.Start(t)
	var n atomic.Int64
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		return open(t, config(srv, fmt.Sprintf("space/conformance-%d", n.Add(1))))
	})
}

// TestConformanceBucketRoot runs the suite with objects at the bucket's
// root, a fresh bucket per subtest.
func TestConformanceBucketRoot(t *testing.T) {
	srv := s3test.Start(t)
	var n atomic.Int64
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		cfg := config(srv, "")
		cfg.Bucket = fmt.Sprintf("root-%d", n.Add(1))
		srv.NewBucket(t, cfg.Bucket)
		return open(t, cfg)
	})
}

// rawClient talks to srv directly, to look at what the driver stored.
func rawClient(t *testing.T, srv *s3test.Server) *minio.Core {
	t.Helper()
	c, err := srv.Client()
	if err != nil {
		t.Fatal(err)
	}
	return &minio.Core{Client: c}
}

// wantNoUploads fails when an incomplete multipart upload is left in srv's
// bucket.
func wantNoUploads(t *testing.T, srv *s3test.Server) {
	t.Helper()
	res, err := rawClient(t, srv).ListMultipartUploads(t.Context(), srv.Bucket, "", "", "", "", 1000)
	if err != nil {
		t.Fatalf("ListMultipartUploads: %v", err)
	}
	for _, u := range res.Uploads {
		t.Errorf("incomplete multipart upload left behind: %s (%s)", u.Key, u.UploadID)
	}
}

// onlyReader hides everything but Read: the size is unknown to the driver.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestMultipartUnknownSize(t *testing.T) {
	srv := s3test.Start(t)
	s := open(t, config(srv, "mp"))
	ctx := t.Context()
	const size = 20<<20 + 3 // three parts of the default 8 MiB
	_, want, _ := objstoretest.DigestOf(objstoretest.Generator(7, size))

	info, err := s.Put(ctx, "big/object", onlyReader{objstoretest.Generator(7, size)}, -1)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if info.Size != size || info.Digest != want {
		t.Errorf("Put = %d %s, want %d %s", info.Size, info.Digest, size, want)
	}
	// It was a multipart upload: the object carries the sidecar marker and
	// an ETag of three parts.
	raw, err := rawClient(t, srv).StatObject(ctx, srv.Bucket, "mp/big/object@", minio.StatObjectOptions{})
	if err != nil {
		t.Fatalf("raw stat: %v", err)
	}
	if raw.UserMetadata["Space-Sha256"] != "sidecar" || !strings.HasSuffix(raw.ETag, "-3") {
		t.Errorf("stored object: metadata %v, ETag %s; want a 3-part multipart object marked sidecar", raw.UserMetadata, raw.ETag)
	}
	st, err := s.Stat(ctx, "big/object")
	if err != nil || st.Digest != want || st.Size != size {
		t.Errorf("Stat = %+v, %v; want size %d digest %s", st, err, size, want)
	}
	rc, ginfo, err := s.Get(ctx, "big/object")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	n, got, err := objstoretest.DigestOf(rc)
	rc.Close()
	if err != nil || n != size || got != want || ginfo.Digest != want {
		t.Errorf("Get = %d bytes %s (info %s), %v; want %d bytes %s", n, got, ginfo.Digest, err, size, want)
	}
	list, err := s.List(ctx, "big/")
	if err != nil || len(list) != 1 || list[0].Digest != want {
		t.Errorf("List = %+v, %v; want big/object with digest %s", list, err, want)
	}
	if err := objstore.Verify(ctx, s, "big/object", info); err != nil {
		t.Errorf("Verify: %v", err)
	}
	wantNoUploads(t, srv)
	// Delete removes the digest record with the object.
	if err := s.Delete(ctx, "big/object"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := rawClient(t, srv).StatObject(ctx, srv.Bucket, "mp/.sha256/big/object@", minio.StatObjectOptions{}); err == nil {
		t.Errorf("the digest record outlived its object")
	}
}

// TestStaleDigestRecord replaces a multipart object behind the driver's back
// by one that claims a record (as a Put that died between completing its
// upload and writing its record would leave): the old record must not be
// reported as the new object's digest.
func TestStaleDigestRecord(t *testing.T) {
	srv := s3test.Start(t)
	s := open(t, config(srv, "stale"))
	ctx := t.Context()
	if _, err := s.Put(ctx, "x", objstoretest.Generator(1, 9<<20), 9<<20); err != nil {
		t.Fatalf("Put: %v", err)
	}
	data := "another object"
	_, err := rawClient(t, srv).PutObject(ctx, srv.Bucket, "stale/x@", strings.NewReader(data), int64(len(data)), "", "",
		minio.PutObjectOptions{UserMetadata: map[string]string{"Space-Sha256": "sidecar"}})
	if err != nil {
		t.Fatalf("raw put: %v", err)
	}
	st, err := s.Stat(ctx, "x")
	if err != nil || st.Size != int64(len(data)) || st.Digest != "" {
		t.Errorf("Stat = %+v, %v; want size %d and no digest", st, err, len(data))
	}
}

// TestConcurrentMultipartPuts races multipart Puts of one key: the object
// left is one writer's, and its reported digest (if any) is its own, never
// that of another writer's record.
func TestConcurrentMultipartPuts(t *testing.T) {
	srv := s3test.Start(t)
	s := open(t, config(srv, "race"))
	ctx := t.Context()
	const writers, size = 3, 9 << 20
	digests := map[string]bool{}
	for w := range writers {
		_, d, _ := objstoretest.DigestOf(objstoretest.Generator(uint64(w), size))
		digests[d] = true
	}
	for round := range 3 {
		errs := make(chan error, writers)
		for w := range writers {
			go func() {
				_, err := s.Put(ctx, "x", onlyReader{objstoretest.Generator(uint64(w), size)}, -1)
				errs <- err
			}()
		}
		for range writers {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: Put: %v", round, err)
			}
		}
		rc, info, err := s.Get(ctx, "x")
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		_, got, err := objstoretest.DigestOf(rc)
		rc.Close()
		if err != nil || !digests[got] {
			t.Fatalf("round %d: the object is no writer's (%s, %v)", round, got, err)
		}
		if info.Digest != "" && info.Digest != got {
			t.Errorf("round %d: reported digest %s, but the content is %s", round, info.Digest, got)
		}
	}
	wantNoUploads(t, srv)
}

// cutProxy forwards TCP connections to a server. Armed, it cuts the first
// connection that has carried more than a number of bytes to the client,
// after calling a hook.
type cutProxy struct {
	addr   string
	target string

	mu    sync.Mutex // guards the fields below
	after int64      // armed when > 0
	onCut func()
	cuts  int
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: l.Addr().String(), target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { p.serve(c) })
		}
	})
	return p
}

func (p *cutProxy) arm(after int64, onCut func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.after, p.onCut = after, onCut
}

func (p *cutProxy) cutCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

func (p *cutProxy) serve(c net.Conn) {
	defer c.Close()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer u.Close()
	go func() { io.Copy(u, c); u.Close() }()
	buf := make([]byte, 32<<10)
	var sent int64
	for {
		n, err := u.Read(buf)
		p.mu.Lock()
		cut := p.after > 0 && sent+int64(n) > p.after
		var hook func()
		if cut {
			p.after, hook = 0, p.onCut
			p.cuts++
		}
		p.mu.Unlock()
		if cut {
			if hook != nil {
				hook()
			}
			return
		}
		if _, werr := c.Write(buf[:n]); werr != nil || err != nil {
			return
		}
		sent += int64(n)
	}
}

// TestGetResumes cuts a download's connection: the read resumes where it
// stopped, and fails rather than mix in an object that replaced the one
// being read.
func TestGetResumes(t *testing.T) {
	srv := s3test.Start(t)
	proxy := startCutProxy(t, srv.Endpoint)
	cfg := config(srv, "resume")
	cfg.Endpoint = proxy.addr
	s := open(t, cfg)
	ctx := t.Context()
	const size = 20 << 20
	if _, err := s.Put(ctx, "x", objstoretest.Generator(5, size), size); err != nil {
		t.Fatal(err)
	}
	_, want, _ := objstoretest.DigestOf(objstoretest.Generator(5, size))

	proxy.arm(5<<20, nil)
	rc, _, err := s.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	n, got, err := objstoretest.DigestOf(rc)
	rc.Close()
	if err != nil || n != size || got != want || proxy.cutCount() != 1 {
		t.Errorf("Get through a cut connection = %d bytes %s, %v (%d cuts); want %d bytes %s after 1 cut", n, got, err, proxy.cutCount(), size, want)
	}

	const off, length = 3 << 20, 10 << 20
	proxy.arm(2<<20, nil)
	rc, _, err = s.GetRange(ctx, "x", off, length)
	if err != nil {
		t.Fatal(err)
	}
	gen := objstoretest.Generator(5, size)
	io.CopyN(io.Discard, gen, off)
	_, wantRange, _ := objstoretest.DigestOf(io.LimitReader(gen, length))
	n, got, err = objstoretest.DigestOf(rc)
	rc.Close()
	if err != nil || n != length || got != wantRange || proxy.cutCount() != 2 {
		t.Errorf("GetRange through a cut connection = %d bytes %s, %v; want %d bytes %s", n, got, err, length, wantRange)
	}

	raw := rawClient(t, srv)
	proxy.arm(5<<20, func() {
		data := strings.Repeat("n", size)
		if _, err := raw.PutObject(ctx, srv.Bucket, "resume/x@", strings.NewReader(data), size, "", "", minio.PutObjectOptions{}); err != nil {
			t.Errorf("replace the object: %v", err)
		}
	})
	rc, _, err = s.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	n, _, err = objstoretest.DigestOf(rc)
	rc.Close()
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "replaced") || n >= size {
		t.Errorf("Get cut while the object was replaced: %d bytes, %v; want ErrUnavailable saying it was replaced", n, err)
	}
}

var errBroken = errors.New("source broke")

// brokenAfter yields n generated bytes, then fails.
type brokenAfter struct {
	r io.Reader
	n int64
}

func (b *brokenAfter) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, errBroken
	}
	p = p[:min(int64(len(p)), b.n)]
	k, err := b.r.Read(p)
	b.n -= int64(k)
	return k, err
}

// TestFailedMultipartLeavesNothing fails multipart Puts in several ways and
// checks that neither an object nor an incomplete upload remains.
func TestFailedMultipartLeavesNothing(t *testing.T) {
	srv := s3test.Start(t)
	s := open(t, config(srv, "fail"))
	for _, tc := range []struct {
		name  string
		r     func(cancel context.CancelFunc) io.Reader
		size  int64
		class error
	}{
		{"reader error", func(context.CancelFunc) io.Reader {
			return &brokenAfter{objstoretest.Generator(1, 1<<30), 19 << 20}
		}, -1, errBroken},
		{"short", func(context.CancelFunc) io.Reader { return objstoretest.Generator(1, 17<<20) }, 30 << 20, errdefs.ErrInvalidArgument},
		{"long", func(context.CancelFunc) io.Reader { return objstoretest.Generator(1, 30<<20) }, 17 << 20, errdefs.ErrInvalidArgument},
		{"canceled", func(cancel context.CancelFunc) io.Reader {
			return io.MultiReader(objstoretest.Generator(1, 18<<20), readFunc(func([]byte) (int, error) {
				cancel()
				return 0, errors.New("read after cancel")
			}))
		}, -1, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			key := "f/" + strings.ReplaceAll(tc.name, " ", "-")
			_, err := s.Put(ctx, key, onlyReader{tc.r(cancel)}, tc.size)
			if !errors.Is(err, tc.class) {
				t.Fatalf("Put: err = %v, want %v", err, tc.class)
			}
			if _, err := s.Stat(t.Context(), key); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Stat after a failed Put: %v, want NotFound", err)
			}
			wantNoUploads(t, srv)
		})
	}
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

// TestServerKilled kills the server: every call must fail with
// ErrUnavailable, promptly.
func TestServerKilled(t *testing.T) {
	srv := s3test.Start(t)
	s := open(t, config(srv, "k"))
	ctx := t.Context()
	if _, err := s.Put(ctx, "x", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	const bound = 15 * time.Second
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Put", func() error { _, err := s.Put(ctx, "y", strings.NewReader("y"), 1); return err }},
		{"Put multipart", func() error { _, err := s.Put(ctx, "z", objstoretest.Generator(1, 20<<20), -1); return err }},
		{"Get", func() error { _, _, err := s.Get(ctx, "x"); return err }},
		{"Stat", func() error { _, err := s.Stat(ctx, "x"); return err }},
		{"List", func() error { _, err := s.List(ctx, ""); return err }},
		{"Delete", func() error { return s.Delete(ctx, "x") }},
	} {
		start := time.Now()
		err := tc.call()
		if took := time.Since(start); !errors.Is(err, errdefs.ErrUnavailable) || took > bound {
			t.Errorf("%s against a dead server: %v after %s; want ErrUnavailable within %s", tc.name, err, took.Round(time.Millisecond), bound)
		}
	}
	_, err := s3store.New(ctx, config(srv, "k"))
	if !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("New against a dead server: %v, want ErrUnavailable", err)
	}
}

// TestServerHung stops the server (it accepts connections and never
// answers): calls and a Get in the middle of its body fail with
// ErrUnavailable after the configured timeouts.
func TestServerHung(t *testing.T) {
	srv := s3test.Start(t)
	cfg := config(srv, "h")
	cfg.OpTimeout = 2 * time.Second
	cfg.ReadIdleTimeout = time.Second
	s := open(t, cfg)
	ctx := t.Context()
	const size = 64 << 20
	if _, err := s.Put(ctx, "x", objstoretest.Generator(1, size), size); err != nil {
		t.Fatal(err)
	}
	rc, _, err := s.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.CopyN(io.Discard, rc, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Signal(syscall.SIGCONT) })
	start := time.Now()
	_, err = io.Copy(io.Discard, rc)
	if took := time.Since(start); !errors.Is(err, errdefs.ErrUnavailable) || took > 10*time.Second {
		t.Errorf("reading a body from a stopped server: %v after %s; want ErrUnavailable", err, took)
	}
	start = time.Now()
	_, err = s.Stat(ctx, "x")
	if took := time.Since(start); !errors.Is(err, errdefs.ErrUnavailable) || took > 10*time.Second {
		t.Errorf("Stat against a stopped server: %v after %s; want ErrUnavailable", err, took)
	}
}

func TestBadCredentials(t *testing.T) {
	srv := s3test.Start(t)
	for _, tc := range []struct {
		name   string
		access string
		secret string
		class  error
	}{
		{"wrong secret", srv.AccessKey, "not-the-secret", errdefs.ErrUnauthenticated},
		{"unknown access key", "NOSUCHKEY", srv.SecretKey, errdefs.ErrUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(srv, "")
			cfg.AccessKey, cfg.SecretKey = tc.access, tc.secret
			_, err := s3store.New(t.Context(), cfg)
			if !errors.Is(err, tc.class) || !strings.Contains(fmt.Sprint(err), "AWS_SECRET_ACCESS_KEY") {
				t.Errorf("New: %v; want %v naming the credential variables", err, tc.class)
			}
			if strings.Contains(fmt.Sprint(err), tc.secret) {
				t.Errorf("the error shows the secret: %v", err)
			}
		})
	}
	cfg := config(srv, "")
	cfg.AccessKey, cfg.SecretKey = "", ""
	if _, err := s3store.New(t.Context(), cfg); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("New without credentials: %v, want FailedPrecondition", err)
	}
}

// TestPrefixIsolation puts the same keys through stores with different
// prefixes of one bucket: none sees or touches another's objects.
func TestPrefixIsolation(t *testing.T) {
	srv := s3test.Start(t)
	ctx := t.Context()
	prefixes := []string{"", "tenant-a", "tenant-ab", "other/deep/prefix"}
	stores := make([]*s3store.Store, len(prefixes))
	for i, p := range prefixes {
		stores[i] = open(t, config(srv, p))
		for _, key := range []string{"k", "dir/k"} {
			data := p + ":" + key
			if _, err := stores[i].Put(ctx, key, strings.NewReader(data), int64(len(data))); err != nil {
				t.Fatalf("Put %s in %q: %v", key, p, err)
			}
		}
	}
	if err := stores[1].Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	for i, p := range prefixes {
		s := stores[i]
		list, err := s.List(ctx, "")
		if err != nil {
			t.Fatalf("List %q: %v", p, err)
		}
		var keys []string
		for _, info := range list {
			keys = append(keys, info.Key)
		}
		want := "dir/k k"
		if i == 1 {
			want = "dir/k"
		}
		if i == 0 {
			// The root store sees the other stores' objects as keys
			// under their prefixes (prefixes must not nest).
			want = "dir/k k other/deep/prefix/dir/k other/deep/prefix/k tenant-a/dir/k tenant-ab/dir/k tenant-ab/k"
		}
		if got := strings.Join(keys, " "); got != want {
			t.Errorf("List in %q = %s, want %s", p, got, want)
		}
		rc, _, err := s.Get(ctx, "dir/k")
		if err != nil {
			t.Fatalf("Get in %q: %v", p, err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		if want := p + ":dir/k"; string(data) != want {
			t.Errorf("Get dir/k in %q = %q, want %q", p, data, want)
		}
	}
}

func TestOpenURL(t *testing.T) {
	srv := s3test.Start(t)
	ctx := t.Context()
	url := "s3://" + srv.Bucket + "/via/url?endpoint=" + srv.Endpoint + "&insecure=1&part_size=5MiB&concurrency=3"

	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := objstore.Open(ctx, url); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Errorf("Open without credentials in the environment: %v; want FailedPrecondition naming AWS_ACCESS_KEY_ID", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	s, err := objstore.Open(ctx, url)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	info, err := s.Put(ctx, "a", objstoretest.Generator(3, 11<<20), -1)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := objstore.Verify(ctx, s, "a", info); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if _, err := rawClient(t, srv).StatObject(ctx, srv.Bucket, "via/url/a@", minio.StatObjectOptions{}); err != nil {
		t.Errorf("the object is not under the URL's prefix: %v", err)
	}

	for _, tc := range []struct {
		url   string
		class error
	}{
		{"s3://no-such-bucket?endpoint=" + srv.Endpoint + "&insecure=1", errdefs.ErrFailedPrecondition},
		{"s3://" + srv.Bucket + "?endpoint=" + srv.Endpoint + "&insecure=1&secret_key=" + srv.SecretKey, errdefs.ErrInvalidArgument},
		{"s3://" + srv.AccessKey + ":" + srv.SecretKey + "@" + srv.Bucket + "?endpoint=" + srv.Endpoint, errdefs.ErrInvalidArgument},
	} {
		_, err := objstore.Open(ctx, tc.url)
		if !errors.Is(err, tc.class) {
			t.Errorf("Open(%s): %v, want %v", strings.ReplaceAll(tc.url, srv.SecretKey, "SECRET"), err, tc.class)
		}
		if err != nil && strings.Contains(err.Error(), srv.SecretKey) {
			t.Errorf("the error shows the secret key: %v", err)
		}
	}
}

// BenchmarkPut100MiB and BenchmarkGet100MiB measure one 100 MiB object's
// trip to and from versitygw on this machine (loopback, POSIX backend).
func BenchmarkPut100MiB(b *testing.B) {
	srv := s3test.Start(b)
	const size = 100 << 20
	for _, conc := range []int{1, s3store.DefaultConcurrency, 4} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			cfg := config(srv, "bench")
			cfg.Concurrency = conc
			s := open(b, cfg)
			b.SetBytes(size)
			for b.Loop() {
				if _, err := s.Put(b.Context(), "x", objstoretest.Generator(1, size), size); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkGet100MiB(b *testing.B) {
	srv := s3test.Start(b)
	s := open(b, config(srv, "bench"))
	const size = 100 << 20
	if _, err := s.Put(b.Context(), "x", objstoretest.Generator(1, size), size); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		rc, _, err := s.Get(b.Context(), "x")
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, rc); err != nil || n != size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		rc.Close()
	}
}
