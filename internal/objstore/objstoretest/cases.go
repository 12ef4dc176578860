package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
)

var errNotFound = errdefs.ErrNotFound

func testRoundTrip(t *testing.T, s objstore.Store) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"one byte", []byte{0}},
		{"text", []byte("hello, object store\n")},
		{"binary", bytes.Repeat([]byte{0, 0xff, '\n', 0x80}, 70_000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "round/" + strings.ReplaceAll(tc.name, " ", "-")
			info := put(t, s, key, tc.data)
			if info.Key != key || info.Size != int64(len(tc.data)) {
				t.Errorf("Put info = %+v, want key %s size %d", info, key, len(tc.data))
			}
			got, ginfo := get(t, s, key)
			if !bytes.Equal(got, tc.data) {
				t.Errorf("Get = %d bytes, want the %d put", len(got), len(tc.data))
			}
			if ginfo.Key != key || ginfo.Size != int64(len(tc.data)) {
				t.Errorf("Get info = %+v, want key %s size %d", ginfo, key, len(tc.data))
			}
			if ginfo.ModTime.IsZero() {
				t.Errorf("Get info has no ModTime")
			}
		})
	}
}

func testDigestAndSize(t *testing.T, s objstore.Store) {
	data := []byte("digest me")
	for _, size := range []int64{int64(len(data)), -1} {
		info, err := s.Put(t.Context(), "d/x", onlyReader{bytes.NewReader(data)}, size)
		if err != nil {
			t.Fatalf("Put size %d: %v", size, err)
		}
		if want := digest(data); info.Digest != want || info.Size != int64(len(data)) {
			t.Errorf("Put size %d: info = %s %d, want %s %d", size, info.Digest, info.Size, want, len(data))
		}
		st, err := s.Stat(t.Context(), "d/x")
		if err != nil {
			t.Fatalf("Stat: %v", err)
		}
		if st.Size != info.Size || (st.Digest != "" && st.Digest != info.Digest) {
			t.Errorf("Stat = %+v, want size %d digest %s (or none)", st, info.Size, info.Digest)
		}
	}
	if got := digest(nil); got != "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("digest of nothing = %s", got)
	}
}

func testSizeMismatch(t *testing.T, s objstore.Store) {
	for _, tc := range []struct {
		name string
		data string
		size int64
	}{
		{"short", "12345", 10},
		{"long", "123456789012345", 10},
		{"empty but announced", "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "size/" + strings.ReplaceAll(tc.name, " ", "-")
			_, err := s.Put(t.Context(), key, strings.NewReader(tc.data), tc.size)
			wantClass(t, "Put", err, errdefs.ErrInvalidArgument)
			wantMissing(t, s, key)
		})
	}
	_, err := s.Put(t.Context(), "size/negative", strings.NewReader(""), -2)
	wantClass(t, "Put size -2", err, errdefs.ErrInvalidArgument)
}

func testOverwrite(t *testing.T, s objstore.Store) {
	put(t, s, "o/x", []byte("first version, longer"))
	put(t, s, "o/x", []byte("second"))
	if got, _ := get(t, s, "o/x"); string(got) != "second" {
		t.Errorf("Get after overwrite = %q, want %q", got, "second")
	}
}

func testMissing(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	_, _, err := s.Get(ctx, "no/such")
	wantClass(t, "Get", err, errNotFound)
	_, _, err = s.GetRange(ctx, "no/such", 0, 1)
	wantClass(t, "GetRange", err, errNotFound)
	_, err = s.Stat(ctx, "no/such")
	wantClass(t, "Stat", err, errNotFound)
	if err := s.Delete(ctx, "no/such"); err != nil {
		t.Errorf("Delete of a missing object: %v, want success", err)
	}
	put(t, s, "dir/child", []byte("x"))
	_, err = s.Stat(ctx, "dir")
	wantClass(t, "Stat of a key that is only a prefix", err, errNotFound)
	_, err = s.Stat(ctx, "dir/child/grandchild")
	wantClass(t, "Stat below an object", err, errNotFound)
	infos, err := s.List(ctx, "nothing/")
	if err != nil || len(infos) != 0 {
		t.Errorf("List of an empty prefix = %v, %v; want nothing", infos, err)
	}
}

func testDelete(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	put(t, s, "del/a/b/c", []byte("c"))
	put(t, s, "del/a/x", []byte("x"))
	if err := s.Delete(ctx, "del/a/b/c"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantMissing(t, s, "del/a/b/c")
	if got, _ := get(t, s, "del/a/x"); string(got) != "x" {
		t.Errorf("sibling after Delete = %q", got)
	}
	if err := s.Delete(ctx, "del/a/b/c"); err != nil {
		t.Errorf("second Delete: %v, want success", err)
	}
	if err := s.Delete(ctx, "del/a"); err != nil {
		t.Errorf("Delete of a prefix with no object: %v, want success", err)
	}
	if _, err := s.Stat(ctx, "del/a/x"); err != nil {
		t.Errorf("Delete of prefix del/a removed del/a/x: %v", err)
	}
	// A key whose directories were pruned can be written again.
	put(t, s, "del/a/b/c", []byte("again"))
	if got, _ := get(t, s, "del/a/b/c"); string(got) != "again" {
		t.Errorf("Get after re-Put = %q", got)
	}
}

func testRange(t *testing.T, s objstore.Store) {
	data := []byte("0123456789")
	put(t, s, "r/x", data)
	for _, tc := range []struct {
		off, n int64
		want   string
	}{
		{0, -1, "0123456789"},
		{0, 3, "012"},
		{7, -1, "789"},
		{7, 100, "789"},
		{10, -1, ""},
		{4, 0, ""},
	} {
		rc, info, err := s.GetRange(t.Context(), "r/x", tc.off, tc.n)
		if err != nil {
			t.Fatalf("GetRange(%d, %d): %v", tc.off, tc.n, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(got) != tc.want || info.Size != 10 {
			t.Errorf("GetRange(%d, %d) = %q, %v, size %d; want %q, size 10", tc.off, tc.n, got, err, info.Size, tc.want)
		}
	}
	for _, bad := range [][2]int64{{-1, 1}, {11, -1}, {0, -2}} {
		_, _, err := s.GetRange(t.Context(), "r/x", bad[0], bad[1])
		wantClass(t, fmt.Sprintf("GetRange(%d, %d)", bad[0], bad[1]), err, errdefs.ErrInvalidArgument)
	}
}

// BadKeys are keys every Store must refuse.
var BadKeys = []string{
	"", "/abs", "trailing/", "a//b", ".", "..", "a/../b", "a/./b", "../escape", ".hidden", "a/.hidden",
	"-dash", "_under", "Upper", "sp ace", "a\\b", "a\x00b", "é", "a/b@", "a:b",
	strings.Repeat("a", objstore.MaxKeyLen+1), strings.Repeat("a", objstore.MaxSegmentLen+1),
}

func testKeyValidation(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	for _, key := range BadKeys {
		_, err := s.Put(ctx, key, strings.NewReader("x"), 1)
		wantClass(t, fmt.Sprintf("Put %q", key), err, errdefs.ErrInvalidArgument)
		_, _, err = s.Get(ctx, key)
		wantClass(t, fmt.Sprintf("Get %q", key), err, errdefs.ErrInvalidArgument)
		_, _, err = s.GetRange(ctx, key, 0, -1)
		wantClass(t, fmt.Sprintf("GetRange %q", key), err, errdefs.ErrInvalidArgument)
		_, err = s.Stat(ctx, key)
		wantClass(t, fmt.Sprintf("Stat %q", key), err, errdefs.ErrInvalidArgument)
		err = s.Delete(ctx, key)
		wantClass(t, fmt.Sprintf("Delete %q", key), err, errdefs.ErrInvalidArgument)
	}
	for _, prefix := range []string{"/", "a//", "../", ".tmp", "a/.x", "A"} {
		_, err := s.List(ctx, prefix)
		wantClass(t, fmt.Sprintf("List %q", prefix), err, errdefs.ErrInvalidArgument)
	}
	good := []string{"a", "0", "a.b", "a_b", "a-b", "a/b/c", "t-1/s/snap.7/memory.enc",
		strings.Repeat("a", objstore.MaxSegmentLen), strings.Repeat("ab/", objstore.MaxKeyLen/3) + "z"}
	for _, key := range good {
		if len(key) > objstore.MaxKeyLen {
			key = key[len(key)-objstore.MaxKeyLen:]
		}
		put(t, s, key, []byte(key))
		if got, _ := get(t, s, key); string(got) != key {
			t.Errorf("Get %q = %q", key, got)
		}
	}
}

func testList(t *testing.T, s objstore.Store) {
	ctx := t.Context()
	keys := []string{"b", "a/z", "a/b/c", "a/b", "ab", "a/b2", "c/d/e/f", "a/a"}
	for _, k := range keys {
		put(t, s, k, []byte(k))
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a/a", "a/b", "a/b/c", "a/b2", "a/z", "ab", "b", "c/d/e/f"}},
		{"a", []string{"a/a", "a/b", "a/b/c", "a/b2", "a/z", "ab"}},
		{"a/", []string{"a/a", "a/b", "a/b/c", "a/b2", "a/z"}},
		{"a/b", []string{"a/b", "a/b/c", "a/b2"}},
		{"a/b/", []string{"a/b/c"}},
		{"c/d/", []string{"c/d/e/f"}},
		{"c/d/e/f", []string{"c/d/e/f"}},
		{"zz", nil},
	} {
		infos, err := s.List(ctx, tc.prefix)
		if err != nil {
			t.Fatalf("List %q: %v", tc.prefix, err)
		}
		var got []string
		for _, info := range infos {
			got = append(got, info.Key)
			if info.Size != int64(len(info.Key)) {
				t.Errorf("List %q: %s has size %d, want %d", tc.prefix, info.Key, info.Size, len(info.Key))
			}
			if info.Digest != "" && info.Digest != digest([]byte(info.Key)) {
				t.Errorf("List %q: %s has digest %s", tc.prefix, info.Key, info.Digest)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("List %q = %v, want %v", tc.prefix, got, tc.want)
		}
	}
}

func testNestedKeys(t *testing.T, s objstore.Store) {
	// An object and a prefix of other objects may share a name, as in S3.
	put(t, s, "n/a", []byte("parent"))
	put(t, s, "n/a/b", []byte("child"))
	if got, _ := get(t, s, "n/a"); string(got) != "parent" {
		t.Errorf("Get n/a = %q", got)
	}
	if got, _ := get(t, s, "n/a/b"); string(got) != "child" {
		t.Errorf("Get n/a/b = %q", got)
	}
	if err := s.Delete(t.Context(), "n/a"); err != nil {
		t.Fatalf("Delete n/a: %v", err)
	}
	if got, _ := get(t, s, "n/a/b"); string(got) != "child" {
		t.Errorf("Get n/a/b after deleting n/a = %q", got)
	}
}

var errSourceBroke = errors.New("objstoretest: source broke")

// brokenReader yields n bytes of data, then fails with errSourceBroke.
type brokenReader struct{ n int }

func (b *brokenReader) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, errSourceBroke
	}
	k := min(len(p), b.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	b.n -= k
	return k, nil
}

func testFailedPut(t *testing.T, s objstore.Store) {
	for _, size := range []int64{-1, 4 << 20} {
		_, err := s.Put(t.Context(), "fail/new", &brokenReader{n: 1 << 20}, size)
		if !errors.Is(err, errSourceBroke) {
			t.Fatalf("Put from a failing reader: err = %v, want it to wrap the reader's error", err)
		}
		wantMissing(t, s, "fail/new")
	}
	// A failed overwrite keeps the old object whole.
	put(t, s, "fail/old", []byte("old content"))
	if _, err := s.Put(t.Context(), "fail/old", &brokenReader{n: 100}, -1); !errors.Is(err, errSourceBroke) {
		t.Fatalf("overwrite from a failing reader: err = %v", err)
	}
	if got, _ := get(t, s, "fail/old"); string(got) != "old content" {
		t.Errorf("Get after a failed overwrite = %q, want the old content", got)
	}
}

func testCanceledPut(t *testing.T, s objstore.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	r := &cancelingReader{r: Generator(1, 8<<20), after: 1 << 20, cancel: cancel}
	_, err := s.Put(ctx, "cancel/x", r, 8<<20)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a canceled context: err = %v, want context.Canceled", err)
	}
	wantMissing(t, s, "cancel/x")
}

// cancelingReader cancels its context after reading a number of bytes.
type cancelingReader struct {
	r      io.Reader
	after  int64
	cancel context.CancelFunc
}

func (c *cancelingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.after -= int64(n); c.after <= 0 {
		c.cancel()
	}
	return n, err
}

// testConcurrentPuts races writers of one key, each with its own uniform
// content, against readers: every read must be exactly one writer's object.
func testConcurrentPuts(t *testing.T, s objstore.Store) {
	const writers, size, rounds = 4, 1 << 20, 3
	contents := make(map[string]byte)
	for w := range writers {
		b := byte('a' + w)
		contents[digest(bytes.Repeat([]byte{b}, size))] = b
	}
	put(t, s, "race/x", bytes.Repeat([]byte{'a'}, size))
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds+64)
	for w := range writers {
		wg.Go(func() {
			for range rounds {
				data := bytes.Repeat([]byte{byte('a' + w)}, size)
				if _, err := s.Put(ctx, "race/x", onlyReader{bytes.NewReader(data)}, -1); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
				}
			}
		})
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := readUniform(ctx, s, "race/x", size); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	data, info := get(t, s, "race/x")
	if _, ok := contents[digest(data)]; !ok || len(data) != size {
		t.Fatalf("final object is %d bytes that match no writer", len(data))
	}
	if info.Digest != "" && info.Digest != digest(data) {
		t.Errorf("final object's recorded digest %s does not match its content", info.Digest)
	}
	// Last complete write wins.
	last := bytes.Repeat([]byte{'z'}, size)
	put(t, s, "race/x", last)
	if got, _ := get(t, s, "race/x"); !bytes.Equal(got, last) {
		t.Errorf("Get after the last Put does not return it")
	}
}

func readUniform(ctx context.Context, s objstore.Store, key string, size int) error {
	rc, info, err := s.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reader: Get: %w", err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("reader: read: %w", err)
	}
	if len(data) != size || int64(len(data)) != info.Size || bytes.Count(data, data[:1]) != size {
		return fmt.Errorf("reader saw a mixed or partial object: %d bytes (info says %d)", len(data), info.Size)
	}
	return nil
}

func testReaderSeesOldObject(t *testing.T, s objstore.Store) {
	put(t, s, "snap/x", []byte("old old old"))
	rc, _, err := s.Get(t.Context(), "snap/x")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	put(t, s, "snap/x", []byte("new"))
	if err := s.Delete(t.Context(), "snap/x"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	got, err := io.ReadAll(rc)
	if err != nil || string(got) != "old old old" {
		t.Errorf("open reader after replace and delete = %q, %v; want the old object", got, err)
	}
}

// onlyReader hides every method but Read, so drivers cannot take a
// shortcut through io.WriterTo, io.Seeker or a known length.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }
