package s3store

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want Config // zero: an error is wanted
	}{
		{"s3://bucket", Config{Bucket: "bucket"}},
		{"s3://bucket/", Config{Bucket: "bucket"}},
		{"s3://my.bucket-1/space/prod/", Config{Bucket: "my.bucket-1", Prefix: "space/prod"}},
		{"s3://b12?endpoint=127.0.0.1:9000&insecure=1&region=eu-west-3", Config{Bucket: "b12", Endpoint: "127.0.0.1:9000", Insecure: true, Region: "eu-west-3"}},
		{"s3://b12?endpoint=[::1]:9000&insecure=false", Config{Bucket: "b12", Endpoint: "[::1]:9000"}},
		{"s3://b12?endpoint=minio.internal.example&part_size=16MiB&concurrency=4", Config{Bucket: "b12", Endpoint: "minio.internal.example", PartSize: 16 << 20, Concurrency: 4}},
		{"s3://b12?part_size=5242880", Config{Bucket: "b12", PartSize: 5 << 20}},
		{"s3://b12?part_size=1GiB", Config{Bucket: "b12", PartSize: 1 << 30}},

		{"file:///x", Config{}},
		{"s3://", Config{}},
		{"s3://ab", Config{}},
		{"s3://Bucket", Config{}},
		{"s3://bucket:9000", Config{}},
		{"s3://-bucket", Config{}},
		{"s3://bu..cket", Config{}},
		{"s3://bucket//double", Config{}},
		{"s3://bucket/.hidden", Config{}},
		{"s3://bucket/Upper", Config{}},
		{"s3://bucket/" + strings.Repeat("a", MaxPrefixLen+1), Config{}},
		{"s3://bucket#frag", Config{}},
		{"s3://bucket?endpoint=http://host:9000", Config{}},
		{"s3://bucket?endpoint=host:0", Config{}},
		{"s3://bucket?endpoint=host:99999", Config{}},
		{"s3://bucket?endpoint=host/path", Config{}},
		{"s3://bucket?endpoint=::1", Config{}},
		{"s3://bucket?endpoint=a&endpoint=b", Config{}},
		{"s3://bucket?insecure=yes", Config{}},
		{"s3://bucket?part_size=1MiB", Config{}},
		{"s3://bucket?part_size=6GiB", Config{}},
		{"s3://bucket?part_size=-1", Config{}},
		{"s3://bucket?concurrency=0", Config{}},
		{"s3://bucket?concurrency=17", Config{}},
		{"s3://bucket?region=us east", Config{}},
		{"s3://bucket?unknown=1", Config{}},
		{"s3://bucket?%zz", Config{}},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", tc.url, err)
		}
		got, err := ParseURL(u)
		if tc.want == (Config{}) {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ParseURL(%q) = %+v, %v; want ErrInvalidArgument", tc.url, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", tc.url, got, err, tc.want)
		}
	}
}

// TestParseURLRefusesSecrets checks that credentials in the URL are refused
// and that the error does not repeat them.
func TestParseURLRefusesSecrets(t *testing.T) {
	const secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"
	for _, raw := range []string{
		"s3://AKIDEXAMPLE:" + secret + "@bucket",
		"s3://" + secret + "@bucket",
		"s3://bucket?secret_key=" + secret,
		"s3://bucket?aws_secret_access_key=" + secret,
		"s3://bucket?access_key=" + secret,
		"s3://bucket?X-Amz-Signature=" + secret,
		"s3://bucket?session_token=" + secret,
		"s3://bucket?Password=" + secret,
		"s3://bucket?endpoint=h&" + secret + "=1",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseURL(u)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseURL(%q): %v, want ErrInvalidArgument", raw, err)
		}
		if err != nil && strings.Contains(err.Error(), secret[:20]) {
			t.Errorf("ParseURL(%q): the error repeats the secret: %v", raw, err)
		}
	}
}

// FuzzParseURL: no input panics, an accepted URL names a valid bucket and
// prefix and carries no credentials, and its rendering parses back to it.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"s3://bucket", "s3://b12/space/prod?endpoint=127.0.0.1:9000&insecure=1&region=eu-west-3",
		"s3://b12?endpoint=[::1]:9000", "s3://b12?part_size=16MiB&concurrency=4", "s3://u:p@bucket",
		"s3://bucket?secret=x", "s3://bucket/%2e%2e/x", "s3://bucket/a%2Fb", "s3://bucket?endpoint=%5B::1%5D:80",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		c, err := ParseURL(u)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("ParseURL(%q): error %v is not ErrInvalidArgument", raw, err)
			}
			return
		}
		if validBucket(c.Bucket) != nil || (c.Prefix != "" && objstore.ValidKey(c.Prefix) != nil) {
			t.Fatalf("ParseURL(%q) accepted bucket %q prefix %q", raw, c.Bucket, c.Prefix)
		}
		if c.AccessKey != "" || c.SecretKey != "" || c.SessionToken != "" || u.User != nil {
			t.Fatalf("ParseURL(%q) took credentials from the URL", raw)
		}
		back, err := url.Parse(c.URL())
		if err != nil {
			t.Fatalf("Config.URL() = %q: %v", c.URL(), err)
		}
		c2, err := ParseURL(back)
		if err != nil || c2 != c {
			t.Fatalf("ParseURL(%q) = %+v, rendered %q, parsed back %+v, %v", raw, c, c.URL(), c2, err)
		}
	})
}

func TestRecordRoundTrip(t *testing.T) {
	r := record{size: 12345, digest: objstore.FormatDigest(make([]byte, 32)), etag: "0123456789abcdef0123456789abcdef-3"}
	got, err := parseRecord(r.marshal())
	if err != nil || got != r {
		t.Fatalf("parseRecord(marshal(%+v)) = %+v, %v", r, got, err)
	}
	for _, bad := range []string{
		"", "\n", "space-sha256 v2 1 sha256:" + strings.Repeat("0", 64) + " e\n",
		"space-sha256 v1 01 sha256:" + strings.Repeat("0", 64) + " e\n",
		"space-sha256 v1 -1 sha256:" + strings.Repeat("0", 64) + " e\n",
		"space-sha256 v1 1 sha256:" + strings.Repeat("0", 63) + " e\n",
		"space-sha256 v1 1 sha256:" + strings.Repeat("0", 64) + " e f\n",
		"space-sha256 v1 1 sha256:" + strings.Repeat("0", 64) + " \n",
		"space-sha256 v1 1 sha256:" + strings.Repeat("0", 64) + " e",
	} {
		if r, err := parseRecord([]byte(bad)); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("parseRecord(%q) = %+v, %v; want ErrFailedPrecondition", bad, r, err)
		}
	}
}

// FuzzParseRecord: records come from the server; no input panics and an
// accepted one renders back to the same bytes.
func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(record{size: 1, digest: objstore.FormatDigest(make([]byte, 32)), etag: "\"abc-2\""}.marshal()))
	f.Add([]byte("space-sha256 v1 0 sha256:x y\n"))
	f.Add([]byte("space-sha256 v1 9223372036854775807 sha256:" + strings.Repeat("f", 64) + " e\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseRecord(b)
		if err != nil {
			return
		}
		if string(r.marshal()) != string(b) {
			t.Fatalf("parseRecord(%q) = %+v, which renders as %q", b, r, r.marshal())
		}
	})
}

func TestCheckContentRange(t *testing.T) {
	for _, tc := range []struct {
		h         string
		off, n    int64
		wantTotal int64 // -1: error
	}{
		{"bytes 0-9/10", 0, 10, 10},
		{"bytes 7-9/10", 7, 3, 10},
		{"bytes 7-9/100", 7, 3, 100},
		{"bytes 7-9/10", 6, 3, -1},
		{"bytes 7-9/10", 7, 4, -1},
		{"bytes 7-10/10", 7, 4, -1},
		{"bytes 07-9/10", 7, 3, -1},
		{"bytes 7-9/*", 7, 3, -1},
		{"bytes */10", 7, 3, -1},
		{"7-9/10", 7, 3, -1},
		{"", 7, 3, -1},
		{"bytes +7-9/10", 7, 3, -1},
	} {
		got, err := checkContentRange(tc.h, tc.off, tc.n)
		if tc.wantTotal < 0 {
			if err == nil {
				t.Errorf("checkContentRange(%q, %d, %d) = %d, want an error", tc.h, tc.off, tc.n, got)
			}
			continue
		}
		if err != nil || got != tc.wantTotal {
			t.Errorf("checkContentRange(%q, %d, %d) = %d, %v; want %d", tc.h, tc.off, tc.n, got, err, tc.wantTotal)
		}
	}
}

// FuzzCheckContentRange: the header comes from the server; an accepted one
// describes the requested range inside the object.
func FuzzCheckContentRange(f *testing.F) {
	f.Add("bytes 7-9/10", int64(7), int64(3))
	f.Add("bytes 0-0/1", int64(0), int64(1))
	f.Add("bytes 9223372036854775806-9223372036854775806/9223372036854775807", int64(9223372036854775806), int64(1))
	f.Fuzz(func(t *testing.T, h string, off, n int64) {
		total, err := checkContentRange(h, off, n)
		if err != nil {
			return
		}
		if off < 0 || n <= 0 || off+n > total || off+n < off {
			t.Fatalf("checkContentRange(%q, %d, %d) accepted total %d", h, off, n, total)
		}
	})
}
