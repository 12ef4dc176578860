package driver

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

func writeCheckpoint(t *testing.T, files map[string][]byte) *Checkpoint {
	t.Helper()
	dir := t.TempDir()
	cp := &Checkpoint{Dir: dir, CreatedAt: time.Now(), Runtime: "vm", MemoryMiB: 256, CPUs: 1, Kernel: "/k"}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := DescribeFile(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		cp.Files = append(cp.Files, f)
	}
	if err := cp.WriteManifest(); err != nil {
		t.Fatal(err)
	}
	return cp
}

func TestCheckpointVerify(t *testing.T) {
	data := bytes.Repeat([]byte("state"), 100000)
	cp := writeCheckpoint(t, map[string][]byte{"memory": data, "meta": []byte("{}")})
	read, err := ReadCheckpoint(cp.Dir)
	if err != nil {
		t.Fatalf("ReadCheckpoint: %v", err)
	}
	if len(read.Files) != 2 || read.MemoryMiB != 256 || read.File("memory") == nil || *read.File("memory") != *cp.File("memory") {
		t.Errorf("ReadCheckpoint = %+v, want %+v", read, cp)
	}
	f, err := read.OpenVerified("memory")
	if err != nil {
		t.Fatalf("OpenVerified of an intact file: %v", err)
	}
	got := make([]byte, 5)
	f.Read(got)
	f.Close()
	if string(got) != "state" {
		t.Errorf("OpenVerified left the offset elsewhere: read %q", got)
	}

	path := filepath.Join(cp.Dir, "memory")
	refused := func(what string) {
		t.Helper()
		_, err := read.OpenVerified("memory")
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: OpenVerified = %v; want FailedPrecondition naming %s", what, err, path)
		}
	}
	// One flipped bit, same size.
	flipped := bytes.Clone(data)
	flipped[len(flipped)/2] ^= 1
	os.WriteFile(path, flipped, 0o600)
	refused("flipped bit")
	os.WriteFile(path, data[:len(data)-1], 0o600)
	refused("truncated")
	os.Remove(path)
	os.Symlink(filepath.Join(cp.Dir, "meta"), path)
	refused("symlink")
	if _, err := read.OpenVerified("other"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("OpenVerified of a file not in the manifest = %v", err)
	}
}

func TestFileDigestSparse(t *testing.T) {
	dir := t.TempDir()
	sparse := filepath.Join(dir, "sparse")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(64 << 20)
	f.WriteAt([]byte("data in the middle"), 32<<20)
	d1, err := FileDigest(f)
	if err != nil {
		t.Fatal(err)
	}
	// The same bytes elsewhere give another digest.
	f.WriteAt(make([]byte, 18), 32<<20)
	f.WriteAt([]byte("data in the middle"), 16<<20)
	d2, _ := FileDigest(f)
	f.Close()
	if d1 == d2 || len(d1) != 64 {
		t.Errorf("digests %s and %s; want two different 64-digit digests", d1, d2)
	}
	// An empty file hashes its size alone.
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	e, _ := os.Open(empty)
	de, err := FileDigest(e)
	e.Close()
	want := sha256.Sum256(make([]byte, 8))
	if err != nil || de != hex.EncodeToString(want[:]) {
		t.Errorf("digest of an empty file = %s, %v", de, err)
	}
}

func TestCheckpointValidate(t *testing.T) {
	good := CheckpointFile{Name: "memory", Size: 1, SHA256: strings.Repeat("ab", 32)}
	for name, cp := range map[string]Checkpoint{
		"relative dir":   {Dir: "cp", Files: []CheckpointFile{good}},
		"no files":       {Dir: "/cp"},
		"slash in name":  {Dir: "/cp", Files: []CheckpointFile{{Name: "../x", SHA256: good.SHA256}}},
		"dot dot":        {Dir: "/cp", Files: []CheckpointFile{{Name: "..", SHA256: good.SHA256}}},
		"duplicate":      {Dir: "/cp", Files: []CheckpointFile{good, good}},
		"short digest":   {Dir: "/cp", Files: []CheckpointFile{{Name: "m", SHA256: "abcd"}}},
		"negative size":  {Dir: "/cp", Files: []CheckpointFile{{Name: "m", Size: -1, SHA256: good.SHA256}}},
		"negative count": {Dir: "/cp", Files: []CheckpointFile{good}, CPUs: -1},
	} {
		if err := cp.Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: Validate = %v, want InvalidArgument", name, err)
		}
	}
	ok := Checkpoint{Dir: "/cp", Files: []CheckpointFile{good}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(good) = %v", err)
	}
	if _, err := ReadCheckpoint(t.TempDir()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ReadCheckpoint of an empty dir = %v, want NotFound", err)
	}
}

func FuzzParseCheckpoint(f *testing.F) {
	f.Add([]byte(`{"files":[{"name":"memory","size":3,"sha256":"` + strings.Repeat("0", 64) + `"}],"memory_mib":256}`))
	f.Add([]byte(`{"files":[{"name":"/etc/passwd"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := parseCheckpoint("/cp", b)
		if err != nil {
			return
		}
		for _, file := range cp.Files {
			if strings.ContainsAny(file.Name, "/\x00") || file.Name == ".." || file.Name == "." {
				t.Fatalf("accepted file name %q", file.Name)
			}
		}
	})
}

// TestVerifiedFiles: a checkpoint file verified once (and settled before)
// is not read again while unchanged; one changed in place, even with its
// modification time set back, or replaced, is hashed again and refused; one
// changed too recently before its check is not remembered; a manifest with
// another digest is not answered from what was verified.
func TestVerifiedFiles(t *testing.T) {
	data := bytes.Repeat([]byte("state"), 100000)
	cp := writeCheckpoint(t, map[string][]byte{"memory": data})
	path := filepath.Join(cp.Dir, "memory")
	// The clock of the hashes: the file's change time plus lag.
	var lag time.Duration
	known := &VerifiedFiles{now: func() time.Time {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return time.Unix(st.Ctim.Unix()).Add(lag)
	}}
	open := func() error {
		t.Helper()
		f, err := cp.OpenVerifiedKnown("memory", known)
		if err != nil {
			return err
		}
		got := make([]byte, 5)
		f.Read(got)
		f.Close()
		if string(got) != "state" {
			t.Errorf("OpenVerifiedKnown left the offset elsewhere: read %q", got)
		}
		return nil
	}
	counts := func(what string, wantHits, wantHashed uint64) {
		t.Helper()
		if hits, hashed := known.Counts(); hits != wantHits || hashed != wantHashed {
			t.Errorf("%s: %d known, %d hashed; want %d, %d", what, hits, hashed, wantHits, wantHashed)
		}
	}
	// Changed 0.5 s before the hash: within Settle (1 s), not remembered.
	lag = 500 * time.Millisecond
	for i := 0; i < 2; i++ {
		if err := open(); err != nil {
			t.Fatalf("OpenVerifiedKnown of an intact file: %v", err)
		}
	}
	counts("a file changed just before", 0, 2)
	lag = 5 * time.Second
	for i := 0; i < 3; i++ {
		if err := open(); err != nil {
			t.Fatalf("OpenVerifiedKnown of an intact, settled file: %v", err)
		}
	}
	counts("a settled file", 2, 3)

	refused := func(what string) {
		t.Helper()
		if err := open(); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: OpenVerifiedKnown = %v; want FailedPrecondition naming %s", what, err, path)
		}
	}
	// One flipped bit in place, the modification time set back; later than
	// a tick of the coarse clock, so the change time moves.
	time.Sleep(50 * time.Millisecond)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{data[len(data)/2] ^ 1}, int64(len(data)/2))
	f.Close()
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	refused("flipped bit in place, mtime set back")
	counts("after the flip", 2, 4)

	// The bytes put back: known again after one hash.
	os.WriteFile(path, data, 0o600)
	open()
	open()
	counts("restored bytes", 3, 5)
	// Replaced by another file of the same size and other bytes.
	flipped := bytes.Clone(data)
	flipped[0] ^= 1
	os.WriteFile(path+".new", flipped, 0o600)
	os.Rename(path+".new", path)
	refused("replaced")

	// Another manifest naming the same (verified) file with another digest.
	os.WriteFile(path, data, 0o600)
	if err := open(); err != nil {
		t.Fatal(err)
	}
	other := *cp
	other.Files = []CheckpointFile{{Name: "memory", Size: int64(len(data)), SHA256: strings.Repeat("0", 64)}}
	if _, err := other.OpenVerifiedKnown("memory", known); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a manifest with another digest of a known file: %v; want FailedPrecondition", err)
	}
}
