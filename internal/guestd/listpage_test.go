package guestd

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// makeFiles creates n empty files named 0 … n-1 in dir.
func makeFiles(t testing.TB, dir string, n int) {
	t.Helper()
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	for i := range n {
		fd, err := unix.Openat(dfd, strconv.Itoa(i), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatalf("create file %d: %v", i, err)
		}
		unix.Close(fd)
	}
}

// memDir is a temporary directory on /dev/shm where that is a tmpfs (a
// third of a million files are made there in a second or two, not the
// minute and more a journalled disk takes), else on t.TempDir's disk.
func memDir(t *testing.T) string {
	t.Helper()
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) != nil || st.Type != unix.TMPFS_MAGIC {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "guestd-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestListPagedBounded lists a directory of 300,000 entries page by page:
// every entry is served exactly once, and each page costs memory bounded by
// the page size, not the directory (bytes allocated per page and the live
// heap after it, from runtime.ReadMemStats; no clock).
func TestListPagedBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 300,000 files")
	}
	const files, size = 300_000, 1000
	dir := memDir(t)
	makeFiles(t, dir, files)
	db := &accountDB{}
	ctx := context.Background()

	seen := make([]bool, files)
	var before, after runtime.MemStats
	var maxAlloc, maxLive uint64
	token, pages := "", 0
	for {
		runtime.GC()
		runtime.ReadMemStats(&before)
		entries, next, err := listPage(ctx, dir, size, token, db)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		maxAlloc = max(maxAlloc, after.TotalAlloc-before.TotalAlloc)
		maxLive = max(maxLive, after.HeapAlloc-min(after.HeapAlloc, before.HeapAlloc))
		pages++
		if len(entries) > size {
			t.Fatalf("page %d holds %d entries, want at most %d", pages, len(entries), size)
		}
		for _, e := range entries {
			i, err := strconv.Atoi(e.GetName())
			if err != nil || i < 0 || i >= files {
				t.Fatalf("page %d: entry %q is no file of the directory", pages, e.GetName())
			}
			if seen[i] {
				t.Fatalf("page %d: entry %q served twice", pages, e.GetName())
			}
			seen[i] = true
		}
		if next == "" {
			break
		}
		if len(entries) != size {
			t.Fatalf("page %d holds %d entries and a next token, want %d (full pages until the last)", pages, len(entries), size)
		}
		token = next
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("entry %d never served (%d pages)", i, pages)
		}
	}
	if pages != files/size {
		t.Errorf("%d pages for %d entries of %d per page, want %d (no empty last page)", pages, files, size, files/size)
	}
	t.Logf("%d pages: at most %d KiB allocated and %d KiB live per page", pages, maxAlloc>>10, maxLive>>10)
	// A page of 1,000 entries allocates well under 2 MiB; the whole
	// directory's entries would be 300 times that.
	if maxAlloc > 4<<20 || maxLive > 4<<20 {
		t.Errorf("a page of %d entries of a %d-entry directory allocated %d KiB (%d KiB live), want at most 4096 KiB: memory grows with the directory, not the page", size, files, maxAlloc>>10, maxLive>>10)
	}
}

// TestListPagedChanges adds and removes entries between pages: every entry
// present for the whole listing is served exactly once, and nothing is served
// that was never in the directory.
func TestListPagedChanges(t *testing.T) {
	dir := t.TempDir()
	makeFiles(t, dir, 5000)
	db := &accountDB{}
	ctx := context.Background()
	seen := map[string]int{}
	token, page := "", 0
	for {
		entries, next, err := listPage(ctx, dir, 700, token, db)
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		for _, e := range entries {
			seen[e.GetName()]++
		}
		// Between pages: remove one stable-range file, add a new one.
		if err := os.Remove(filepath.Join(dir, strconv.Itoa(4000+page))); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("new-%d", page)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		page++
		if next == "" {
			break
		}
		token = next
	}
	for i := range 4000 {
		if n := seen[strconv.Itoa(i)]; n != 1 {
			t.Errorf("entry %d, present throughout, served %d times, want 1", i, n)
		}
	}
	for name, n := range seen {
		if n > 1 {
			t.Errorf("entry %q served %d times", name, n)
		}
	}
}

// TestPageTokenRefused: a token of another directory, of a directory that
// was replaced, or one that is not a token, is refused as errBadPageToken
// before the listing starts.
func TestPageTokenRefused(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		makeFiles(t, d, 10)
	}
	db := &accountDB{}
	ctx := context.Background()
	_, tokenA, err := listPage(ctx, a, 3, "", db)
	if err != nil || tokenA == "" {
		t.Fatalf("first page of %s: token %q, %v", a, tokenA, err)
	}
	if _, _, err := listPage(ctx, a, 3, tokenA, db); err != nil {
		t.Fatalf("second page of %s with its own token: %v", a, err)
	}
	if _, _, err := listPage(ctx, b, 3, tokenA, db); !errors.Is(err, errBadPageToken) {
		t.Errorf("listing %s with a token of %s: %v, want errBadPageToken", b, a, err)
	}
	// a replaced: same path, a new directory.
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(a, 0o755); err != nil {
		t.Fatal(err)
	}
	makeFiles(t, a, 10)
	if _, _, err := listPage(ctx, a, 3, tokenA, db); !errors.Is(err, errBadPageToken) {
		t.Errorf("listing a replaced %s with the old directory's token: %v, want errBadPageToken", a, err)
	}

	// Tokens that are not what this daemon issues, each built from a
	// token of b itself so that only the damage can refuse it.
	_, tokenB, err := listPage(ctx, b, 3, "", db)
	if err != nil || tokenB == "" {
		t.Fatalf("first page of %s: token %q, %v", b, tokenB, err)
	}
	good, err := decodePageToken(tokenB)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := listPage(ctx, b, 3, good.encode(), db); err != nil {
		t.Fatalf("a re-encoded token of %s: %v", b, err)
	}
	bad := map[string]string{
		"empty-looking": "=",
		"short":         tokenB[:len(tokenB)-1],
		"long":          tokenB + "AA",
		"not base64":    "!" + tokenB[1:],
		"padded":        tokenB + "==",
		"version":       withVersion(t, tokenB, 2),
		"zero cookie":   pageToken{dir: good.dir}.encode(),
		"neg cookie":    pageToken{dir: good.dir, cookie: -5}.encode(),
		"min cookie":    pageToken{dir: good.dir, cookie: math.MinInt64}.encode(),
	}
	for name, tok := range bad {
		if _, _, err := listPage(ctx, b, 3, tok, db); !errors.Is(err, errBadPageToken) {
			t.Errorf("%s token %q: %v, want errBadPageToken", name, tok, err)
		}
	}
}

// withVersion returns tok with its version byte set to v.
func withVersion(t *testing.T, tok string, v byte) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatal(err)
	}
	raw[0] = v
	return base64.RawURLEncoding.EncodeToString(raw)
}

// FuzzDecodePageToken feeds arbitrary strings as tokens: decoding never
// panics, and whatever decodes is canonical (encodes back to the same string)
// and holds a position a listing can have.
func FuzzDecodePageToken(f *testing.F) {
	f.Add("")
	f.Add(pageToken{dir: dirIdentity{dev: 2049, ino: 12, birthSec: 1700000000, birthNsec: 5}, cookie: 42}.encode())
	f.Add(pageToken{dir: dirIdentity{dev: 1, ino: 1}, cookie: math.MaxInt64}.encode())
	f.Add("AQAAAAAAAAgBAAAAAAAAAAwAAAAAZVPxAAAAAAUAAAAAAAAAKgAA")
	f.Fuzz(func(t *testing.T, s string) {
		tk, err := decodePageToken(s)
		if err != nil {
			if !errors.Is(err, errBadPageToken) {
				t.Fatalf("decode %q: %v, not errBadPageToken", s, err)
			}
			return
		}
		if tk.cookie <= 0 || tk.dir.birthNsec >= 1e9 {
			t.Fatalf("decode %q accepted %+v", s, tk)
		}
		if got := tk.encode(); got != s {
			t.Fatalf("decode %q then encode = %q: two spellings of one token", s, got)
		}
	})
}

// FuzzListPageCookie lists a real directory from a well-formed token of it
// holding an arbitrary cookie: the daemon never panics or serves a name that
// is not in the directory, whatever position the token claims.
func FuzzListPageCookie(f *testing.F) {
	dir := f.TempDir()
	makeFiles(f, dir, 300)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		f.Fatal(err)
	}
	id, err := identityOf(fd)
	unix.Close(fd)
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range []int64{1, 2, 100, 1 << 31, math.MaxInt64, -1, 0} {
		f.Add(c, uint16(10))
	}
	db := &accountDB{}
	f.Fuzz(func(t *testing.T, cookie int64, size uint16) {
		tok := pageToken{dir: id, cookie: cookie}.encode()
		entries, _, err := listPage(context.Background(), dir, pageSizeOf(uint32(size)), tok, db)
		if err != nil {
			if cookie > 0 && !errors.Is(err, errBadPageToken) {
				t.Fatalf("cookie %d: %v", cookie, err)
			}
			return
		}
		if cookie <= 0 {
			t.Fatalf("cookie %d accepted", cookie)
		}
		for _, e := range entries {
			if i, err := strconv.Atoi(e.GetName()); err != nil || i < 0 || i >= 300 {
				t.Fatalf("cookie %d served %q, not in the directory", cookie, e.GetName())
			}
		}
	})
}
