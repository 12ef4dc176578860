package objstore_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

func TestValidKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"a", true},
		{"t-abc/sandboxes/0123/snapshots/7/memory.enc", true},
		{"a_b.c-d/0", true},
		{strings.Repeat("a", objstore.MaxSegmentLen), true},
		{strings.Repeat("a/", objstore.MaxKeyLen/2-1) + "aa", true},
		{"", false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{"..", false},
		{"a/../b", false},
		{"./a", false},
		{".tmp", false},
		{"a/.b", false},
		{"-a", false},
		{"_a", false},
		{"A", false},
		{"a b", false},
		{"a@", false},
		{"a\x00", false},
		{"ä", false},
		{strings.Repeat("a", objstore.MaxSegmentLen+1), false},
		{strings.Repeat("a/", objstore.MaxKeyLen/2) + "a", false},
	} {
		err := objstore.ValidKey(tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("ValidKey(%.40q) = %v, want ok=%v", tc.key, err, tc.ok)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("ValidKey(%.40q) error %v is not InvalidArgument", tc.key, err)
		}
	}
}

func TestValidPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"", true}, {"a", true}, {"a/", true}, {"a/b", true}, {"snap-", true},
		{"/", false}, {"a//", false}, {"../", false}, {".", false}, {"a/.", false},
	} {
		if err := objstore.ValidPrefix(tc.prefix); (err == nil) != tc.ok {
			t.Errorf("ValidPrefix(%q) = %v, want ok=%v", tc.prefix, err, tc.ok)
		}
	}
}

func TestOpenRouting(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		url   string
		class error
		text  string
	}{
		// Nor s3store.
		{"s3://bucket/prefix", errdefs.ErrFailedPrecondition, "not linked"},
		// This test binary does not import filestore.
		{"file:///var/lib/space/objects", errdefs.ErrFailedPrecondition, "not linked"},
		{"gs://bucket", errdefs.ErrInvalidArgument, "unknown scheme"},
		{"/no/scheme", errdefs.ErrInvalidArgument, "unknown scheme"},
		{"%zz", errdefs.ErrInvalidArgument, ""},
	} {
		s, err := objstore.Open(ctx, tc.url)
		if s != nil || !errors.Is(err, tc.class) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("Open(%q) = %v, %v; want class %v mentioning %q", tc.url, s, err, tc.class, tc.text)
		}
	}
}

func TestDigester(t *testing.T) {
	d := objstore.NewDigester()
	data := bytes.Repeat([]byte("xyz"), 1000)
	d.Write(data[:10])
	d.Write(data[10:])
	sum := sha256.Sum256(data)
	if d.Size() != int64(len(data)) || d.Digest() != objstore.FormatDigest(sum[:]) {
		t.Errorf("Digester = %d %s", d.Size(), d.Digest())
	}
	if !objstore.ValidDigest(d.Digest()) {
		t.Errorf("ValidDigest(%s) = false", d.Digest())
	}
	for _, bad := range []string{"", "sha256:", "sha256:" + strings.Repeat("A", 64), "md5:" + strings.Repeat("a", 64), d.Digest() + "0"} {
		if objstore.ValidDigest(bad) {
			t.Errorf("ValidDigest(%q) = true", bad)
		}
	}
}

// FuzzValidKey checks that every accepted key is a clean relative path of
// the key alphabet that no driver can turn into a traversal.
func FuzzValidKey(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../a", "a/./b", "a//b", ".tmp/x", "a/b@", "x/..", "a/b.", "a/-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if objstore.ValidKey(key) != nil {
			return
		}
		if len(key) > objstore.MaxKeyLen || path.Clean(key) != key || path.IsAbs(key) {
			t.Fatalf("accepted %q, which is not a clean relative path", key)
		}
		for seg := range strings.SplitSeq(key, "/") {
			if seg == "." || seg == ".." || strings.HasPrefix(seg, ".") || len(seg) > objstore.MaxSegmentLen {
				t.Fatalf("accepted %q with segment %q", key, seg)
			}
		}
		if strings.ContainsAny(key, "@\x00\\") || strings.ToLower(key) != key {
			t.Fatalf("accepted %q with a reserved byte", key)
		}
		if objstore.ValidPrefix(key) != nil || objstore.ValidPrefix(key+"/") != nil {
			t.Fatalf("valid key %q is not a valid prefix", key)
		}
	})
}
