package s3store

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
)

// The environment variables credentials come from: the names every S3 tool
// reads.
const (
	envAccessKey    = "AWS_ACCESS_KEY_ID"
	envSecretKey    = "AWS_SECRET_ACCESS_KEY"
	envSessionToken = "AWS_SESSION_TOKEN"
)

// CredentialsFromEnv returns AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN (optional). Credentials never come from the URL: URLs
// end up in flags, process listings and logs.
func CredentialsFromEnv() (accessKey, secretKey, sessionToken string) {
	return os.Getenv(envAccessKey), os.Getenv(envSecretKey), os.Getenv(envSessionToken)
}

// The query parameters of an s3:// URL.
const (
	paramEndpoint    = "endpoint"
	paramRegion      = "region"
	paramInsecure    = "insecure"
	paramPartSize    = "part_size"
	paramConcurrency = "concurrency"
)

var knownParams = []string{paramEndpoint, paramRegion, paramInsecure, paramPartSize, paramConcurrency}

// ParseURL reads the Config (without credentials) of
//
//	s3://BUCKET[/PREFIX][?endpoint=HOST[:PORT]&region=R&insecure=1&part_size=N&concurrency=N]
//
// PREFIX is a valid objstore key ("space/prod"); endpoint defaults to
// s3.amazonaws.com and region to us-east-1; insecure=1 (or true) speaks plain
// HTTP, for a server on localhost or a private network; part_size is bytes
// or a number of MiB or GiB ("16MiB"); concurrency is the number of parts
// of one Put in flight. Unknown parameters are refused, and so is anything
// that looks like a credential (user info, a parameter naming a key, secret,
// token or signature), with an error that names the parameter but never
// echoes its value. Errors are ErrInvalidArgument.
func ParseURL(u *url.URL) (Config, error) {
	var c Config
	if u.Scheme != "s3" {
		return c, invalidURL("scheme %q is not s3", u.Scheme)
	}
	if u.User != nil {
		return c, invalidURL("credentials do not belong in the URL (it ends up in logs): set %s and %s instead", envAccessKey, envSecretKey)
	}
	if u.Opaque != "" || u.Fragment != "" || u.RawFragment != "" {
		return c, invalidURL("want s3://bucket/prefix with no fragment")
	}
	if u.Port() != "" || strings.Contains(u.Host, ":") {
		return c, invalidURL("the host part is the bucket name; give the server as ?endpoint=host:port")
	}
	c.Bucket = u.Host
	if err := validBucket(c.Bucket); err != nil {
		return Config{}, err
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" {
		c.Prefix = strings.TrimSuffix(p, "/")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, invalidURL("query: malformed")
	}
	if err := parseQuery(&c, q); err != nil {
		return Config{}, err
	}
	d := c.withDefaults()
	d.AccessKey, d.SecretKey = "-", "-" // checked by New, not here
	if err := d.validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func parseQuery(c *Config, q url.Values) error {
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if looksSecret(name) {
			return invalidURL("parameter %s looks like a credential, which does not belong in the URL (it ends up in logs): set %s and %s instead",
				quoteName(name), envAccessKey, envSecretKey)
		}
		if !slices.Contains(knownParams, name) {
			return invalidURL("unknown parameter %s (known: %s)", quoteName(name), strings.Join(knownParams, ", "))
		}
		if len(q[name]) != 1 {
			return invalidURL("parameter %s given %d times", name, len(q[name]))
		}
	}
	var err error
	c.Endpoint = q.Get(paramEndpoint)
	c.Region = q.Get(paramRegion)
	if v, ok := q[paramInsecure]; ok {
		switch v[0] {
		case "1", "true":
			c.Insecure = true
		case "0", "false":
		default:
			return invalidURL("insecure=%.20q: want 1, true, 0 or false", v[0])
		}
	}
	if v, ok := q[paramPartSize]; ok {
		if c.PartSize, err = parseSize(v[0]); err != nil {
			return err
		}
	}
	if v, ok := q[paramConcurrency]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 {
			return invalidURL("concurrency=%.20q: want a positive number", v[0])
		}
		c.Concurrency = n
	}
	return nil
}

// quoteName quotes a parameter name for an error message if it is short and
// lower case, the shape of a real parameter; anything else (a key pasted
// in the wrong place?) is not repeated.
func quoteName(name string) string {
	if len(name) > 24 {
		return "(name not shown)"
	}
	for _, c := range []byte(name) {
		if !alnum(c) && c != '_' && c != '-' {
			return "(name not shown)"
		}
	}
	return strconv.Quote(name)
}

// looksSecret reports whether a query parameter's name suggests a
// credential (access_key, aws_secret_access_key, X-Amz-Signature, token...).
func looksSecret(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"key", "secret", "token", "password", "passwd", "credential", "signature", "auth", "x-amz-"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// parseSize reads a byte count: digits, optionally followed by MiB or GiB.
func parseSize(s string) (int64, error) {
	num, mult := s, int64(1)
	if v, ok := strings.CutSuffix(s, "MiB"); ok {
		num, mult = v, 1<<20
	} else if v, ok := strings.CutSuffix(s, "GiB"); ok {
		num, mult = v, 1<<30
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > maxPartSize/mult {
		return 0, invalidURL("part_size=%.20q: want bytes, or a number of MiB or GiB, at most 5GiB", s)
	}
	return n * mult, nil
}

// URL renders c (without credentials) as an s3:// URL that ParseURL reads
// back; parameters at their default are left out.
func (c Config) URL() string {
	u := url.URL{Scheme: "s3", Host: c.Bucket}
	if c.Prefix != "" {
		u.Path = "/" + c.Prefix
	}
	q := url.Values{}
	if c.Endpoint != "" {
		q.Set(paramEndpoint, c.Endpoint)
	}
	if c.Region != "" {
		q.Set(paramRegion, c.Region)
	}
	if c.Insecure {
		q.Set(paramInsecure, "1")
	}
	if c.PartSize != 0 {
		q.Set(paramPartSize, strconv.FormatInt(c.PartSize, 10))
	}
	if c.Concurrency != 0 {
		q.Set(paramConcurrency, strconv.Itoa(c.Concurrency))
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// validBucket applies S3's bucket naming rules: 3 to 63 bytes of
// [a-z0-9.-], starting and ending with a letter or digit, no "..".
func validBucket(b string) error {
	ok := len(b) >= 3 && len(b) <= 63 && alnum(b[0]) && alnum(b[len(b)-1]) && !strings.Contains(b, "..")
	for i := 0; ok && i < len(b); i++ {
		ok = alnum(b[i]) || b[i] == '.' || b[i] == '-'
	}
	if !ok {
		return fmt.Errorf("s3 bucket %.70q: want 3 to 63 bytes of [a-z0-9.-] starting and ending with a letter or digit: %w",
			b, errdefs.ErrInvalidArgument)
	}
	return nil
}

// validEndpoint accepts host or host:port, where host is a DNS name, an IPv4
// address or a bracketed IPv6 address; no scheme, user or path.
func validEndpoint(e string) error {
	bad := func() error {
		return fmt.Errorf("s3 endpoint %.80q: want host or host:port (no scheme: use insecure=1 for plain HTTP): %w", e, errdefs.ErrInvalidArgument)
	}
	host := e
	if strings.HasPrefix(e, "[") || strings.Count(e, ":") == 1 {
		h, port, err := net.SplitHostPort(e)
		if err != nil {
			return bad()
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return bad()
		}
		host = h
	}
	if ip := net.ParseIP(host); ip != nil {
		if strings.Contains(host, ":") != strings.HasPrefix(e, "[") || strings.Contains(host, "%") {
			return bad()
		}
		return nil
	}
	if host == "" || len(host) > 253 || host[0] == '.' || host[0] == '-' || strings.Contains(host, "..") {
		return bad()
	}
	for _, c := range []byte(host) {
		if !alnum(c) && !('A' <= c && c <= 'Z') && c != '.' && c != '-' {
			return bad()
		}
	}
	return nil
}

// validRegion accepts AWS-style region names ("us-east-1", "garage").
func validRegion(r string) bool {
	if r == "" || len(r) > 64 {
		return false
	}
	for _, c := range []byte(r) {
		if !alnum(c) && c != '-' && c != '_' {
			return false
		}
	}
	return true
}

func alnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

func invalidURL(format string, args ...any) error {
	return fmt.Errorf("s3 object store URL: %s: %w", fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}
