// Package s3store is the s3:// driver of objstore: objects live in a bucket
// of an S3-compatible server (AWS S3, MinIO, Ceph RGW, versitygw, ...),
// reached with minio-go.
//
// Layout in the bucket, under the URL's optional prefix P:
//
//	P/a/b/c@            the object with key "a/b/c"
//	P/.sha256/a/b/c@    digest record of a multipart object (see below)
//
// As in filestore, every object name ends in "@", a byte keys never hold.
// S3 itself lets "a/b" and "a/b/c" coexist, but servers that map names onto a
// filesystem (MinIO, versitygw's POSIX backend) refuse an object whose name
// is also a "directory" of other objects; with the suffix no object name is
// ever a prefix segment of another, so the driver works on all of them. Key
// segments never start with ".", so .sha256 cannot collide with an object.
//
// Put streams in parts of Config.PartSize bytes, at most Config.Concurrency
// parts in flight, so it holds at most (Concurrency+1) × PartSize bytes
// whatever the object's size. An object that fits in one part is sent with a
// single PUT carrying its SHA-256 twice: as the signed payload hash (the
// server checks the bytes) and as the user metadata x-amz-meta-space-sha256
// that Stat, Get and List report. A larger object is a multipart upload; each
// part is sent with its own SHA-256 as the signed payload hash. S3 cannot
// attach metadata to an object after its multipart upload completes (a
// self-copy could, but on AWS it rewrites the whole object), so the digest of
// a multipart object goes into a small record at P/.sha256/<key>@ that names
// the object's ETag and size: a record whose ETag and size do not match the
// object in place (a concurrent Put replaced it, or a Put crashed between its
// upload and its record) is ignored, so a reported digest is never that of
// another object. Digest-less objects are still verifiable with
// objstore.Verify, which reads the bytes.
//
// Visibility is atomic because S3's PUT and CompleteMultipartUpload are. A
// Put that fails (reader error, wrong length, canceled context, server
// error) aborts its multipart upload, so nothing of it stays visible or
// billed; an abort that cannot reach the server leaves an incomplete upload,
// which a bucket lifecycle rule (AbortIncompleteMultipartUpload) reclaims.
//
// Every request is retried by minio-go with exponential backoff and jitter
// (Config.MaxRetries), every call is bounded by Config.OpTimeout, and a Get
// whose connection breaks or whose body stalls longer than
// Config.ReadIdleTimeout resumes at its position with a ranged GET If-Match
// the ETag it opened (a few times, never mixing in a replaced object): a
// dead or hung server gives ErrUnavailable in bounded time, never a hang.
package s3store

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

const (
	objectSuffix = "@"
	sidecarDir   = ".sha256/"
	// metaDigest is the user metadata key (x-amz-meta-space-sha256) holding
	// the digest of a single-PUT object, or metaSidecar for a multipart one.
	metaDigest  = "Space-Sha256"
	metaSidecar = "sidecar"

	// minPartSize and maxPartSize are S3's limits on a part (all but the
	// last); maxParts is its limit on the number of parts.
	minPartSize = 5 << 20
	maxPartSize = 5 << 30
	maxParts    = 10_000
	// maxObjectSize is S3's limit on one object.
	maxObjectSize = 5 << 40
)

// MaxPrefixLen is the longest Config.Prefix: with it, "/", ".sha256/", a
// key of objstore.MaxKeyLen bytes and "@", every name the store uses stays
// within S3's 1024 bytes.
const MaxPrefixLen = 1024 - objstore.MaxKeyLen - len("/") - len(sidecarDir) - len(objectSuffix)

// Defaults of Config.
const (
	DefaultEndpoint        = "s3.amazonaws.com"
	DefaultRegion          = "us-east-1"
	DefaultPartSize        = 8 << 20
	DefaultConcurrency     = 2
	DefaultMaxRetries      = 5
	DefaultOpTimeout       = 2 * time.Minute
	DefaultReadIdleTimeout = time.Minute
)

// Config says which bucket (and key prefix in it) a Store uses and how to
// reach it. The zero value of every field but Bucket, AccessKey and
// SecretKey means its default.
type Config struct {
	// Bucket is the bucket's name; it must exist.
	Bucket string
	// Prefix, when set, is a valid objstore key under which every object
	// is stored (as Prefix + "/" + key), so stores with different prefixes
	// share a bucket without seeing each other's objects.
	Prefix string
	// Endpoint is the server's host[:port] (DefaultEndpoint).
	Endpoint string
	// Region is the bucket's region (DefaultRegion). It is always set, so
	// the client never asks the server where a bucket lives.
	Region string
	// Insecure selects plain HTTP instead of HTTPS.
	Insecure bool
	// AccessKey, SecretKey and the optional SessionToken sign requests.
	AccessKey, SecretKey, SessionToken string
	// PartSize is the size of a multipart upload's parts, between 5 MiB and
	// 5 GiB (DefaultPartSize). Objects of known size whose parts would
	// exceed S3's 10,000 use larger parts.
	PartSize int64
	// Concurrency is the number of parts of one Put in flight (1 to 16;
	// DefaultConcurrency).
	Concurrency int
	// MaxRetries is the number of attempts minio-go makes for one request
	// (DefaultMaxRetries).
	MaxRetries int
	// OpTimeout bounds one call's requests, retries included, and each part
	// upload of a Put (DefaultOpTimeout).
	OpTimeout time.Duration
	// ReadIdleTimeout fails a Get whose body yields nothing for that long
	// (DefaultReadIdleTimeout).
	ReadIdleTimeout time.Duration
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.PartSize == 0 {
		c.PartSize = DefaultPartSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.ReadIdleTimeout == 0 {
		c.ReadIdleTimeout = DefaultReadIdleTimeout
	}
	return c
}

// validate checks a Config that has its defaults applied.
func (c Config) validate() error {
	if err := validBucket(c.Bucket); err != nil {
		return err
	}
	if c.Prefix != "" {
		if err := objstore.ValidKey(c.Prefix); err != nil {
			return fmt.Errorf("s3 store prefix: %w", err)
		}
		if len(c.Prefix) > MaxPrefixLen {
			return fmt.Errorf("s3 store prefix %.40q...: longer than %d bytes: %w", c.Prefix, MaxPrefixLen, errdefs.ErrInvalidArgument)
		}
	}
	if err := validEndpoint(c.Endpoint); err != nil {
		return err
	}
	if !validRegion(c.Region) {
		return fmt.Errorf("s3 store region %q: want letters, digits and dashes: %w", c.Region, errdefs.ErrInvalidArgument)
	}
	if c.PartSize < minPartSize || c.PartSize > maxPartSize {
		return fmt.Errorf("s3 store part size %d: want %d MiB to %d GiB: %w", c.PartSize, minPartSize>>20, maxPartSize>>30, errdefs.ErrInvalidArgument)
	}
	if c.Concurrency < 1 || c.Concurrency > 16 {
		return fmt.Errorf("s3 store concurrency %d: want 1 to 16: %w", c.Concurrency, errdefs.ErrInvalidArgument)
	}
	if c.MaxRetries < 1 || c.OpTimeout <= 0 || c.ReadIdleTimeout <= 0 {
		return fmt.Errorf("s3 store: retries and timeouts must be positive: %w", errdefs.ErrInvalidArgument)
	}
	if c.AccessKey == "" || c.SecretKey == "" {
		return fmt.Errorf("s3 store: no credentials: set %s and %s: %w", envAccessKey, envSecretKey, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Store is an s3:// object store. Its methods are safe for concurrent use.
type Store struct {
	cfg       Config
	core      *minio.Core
	transport *http.Transport
	root      string // "" or Prefix + "/"
	// parts recycles part buffers of cfg.PartSize bytes between Puts.
	parts sync.Pool
}

var _ objstore.Store = (*Store)(nil)

func init() { objstore.Register("s3", openURL) }

// openURL is the objstore driver for s3:// URLs (see ParseURL); the
// credentials come from the environment (see CredentialsFromEnv).
func openURL(ctx context.Context, u *url.URL) (objstore.Store, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	cfg.AccessKey, cfg.SecretKey, cfg.SessionToken = CredentialsFromEnv()
	return New(ctx, cfg)
}

// New connects to the bucket cfg names and checks that it exists and that
// the credentials are accepted.
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	transport := newTransport(cfg)
	core, err := minio.NewCore(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken),
		Secure:       !cfg.Insecure,
		Region:       cfg.Region,
		Transport:    transport,
		MaxRetries:   cfg.MaxRetries,
		BucketLookup: minio.BucketLookupAuto,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 store %s: %v: %w", cfg.describe(), err, errdefs.ErrInvalidArgument)
	}
	s := &Store{cfg: cfg, core: core, transport: transport}
	if cfg.Prefix != "" {
		s.root = cfg.Prefix + "/"
	}
	s.parts.New = func() any { b := make([]byte, cfg.PartSize); return &b }
	if err := s.checkBucket(ctx); err != nil {
		transport.CloseIdleConnections()
		return nil, err
	}
	return s, nil
}

// checkBucket makes sure the bucket exists and the credentials work, so that
// a wrong URL or key fails at startup rather than at the first hibernation.
// It lists one name: unlike a HEAD, a GET's error has a body that says what
// the server refused (SignatureDoesNotMatch, InvalidAccessKeyId, ...).
func (s *Store) checkBucket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	for oi := range s.core.ListObjectsIter(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.root, MaxKeys: 1}) {
		if oi.Err != nil {
			if isCode(oi.Err, "NoSuchBucket") {
				return fmt.Errorf("s3 store %s: bucket %s does not exist (SPACE does not create buckets; create it): %w",
					s.cfg.describe(), s.cfg.Bucket, errdefs.ErrFailedPrecondition)
			}
			return s.classify(ctx, "open", "", oi.Err)
		}
		break
	}
	return nil
}

// newTransport is an HTTP transport whose every wait is bounded: dialing,
// the TLS handshake and the wait for response headers.
func newTransport(cfg Config) *http.Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: min(cfg.OpTimeout, time.Minute),
		ExpectContinueTimeout: time.Second,
		// Compression would change lengths and break ranges.
		DisableCompression: true,
	}
}

// Close releases idle connections.
func (s *Store) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

// objectName is the S3 name of the object with key.
func (s *Store) objectName(key string) string { return s.root + key + objectSuffix }

// sidecarName is the S3 name of the digest record of the object with key.
func (s *Store) sidecarName(key string) string { return s.root + sidecarDir + key + objectSuffix }

// keyOf is the key of the object stored under S3 name, or false for names
// that are not objects of this store (digest records, foreign objects).
func (s *Store) keyOf(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, s.root)
	if !ok {
		return "", false
	}
	key, ok := strings.CutSuffix(rest, objectSuffix)
	if !ok || objstore.ValidKey(key) != nil {
		return "", false
	}
	return key, true
}

// opContext bounds one call's requests.
func (s *Store) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.OpTimeout)
}

// describe names the store in errors: endpoint, bucket and prefix, never
// credentials.
func (c Config) describe() string {
	return "s3://" + c.Bucket + "/" + c.Prefix + " at " + c.Endpoint
}
