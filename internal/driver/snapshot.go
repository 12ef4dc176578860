package driver

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Checkpointer is implemented by drivers that can save an execution's full
// state (memory, devices, disk) so that Restorer can start new executions
// from it.
type Checkpointer interface {
	// Checkpoint pauses the execution (if it runs) and saves its full state
	// into dir, which must not exist yet (its parent must). The execution
	// stays paused: the caller resumes it (Pauser.Resume) or kills it.
	Checkpoint(ctx context.Context, execID, dir string) (*Checkpoint, error)
}

// Restorer is implemented by drivers that start an execution from a
// checkpoint instead of booting it.
type Restorer interface {
	// Restore verifies every file of cp against its recorded size and digest
	// (refusing a mismatch before anything reads the file) and starts a new
	// execution spec.ExecID in the checkpointed state. The returned Instance
	// is as from Start. The guest continues where it was saved, with the RNG
	// state, clock and identity of the checkpoint: the caller re-seeds, sets
	// the clock and installs the identity (guest Control.Init) after every
	// restore.
	Restore(ctx context.Context, spec Spec, cp *Checkpoint) (*Instance, error)
}

// CheckpointManifest is the name of the manifest Checkpoint writes in its
// directory (ReadCheckpoint reads it back).
const CheckpointManifest = "checkpoint.json"

// Checkpoint describes a saved execution: the files in Dir and what is needed
// to restore them.
type Checkpoint struct {
	// Dir is the checkpoint's directory.
	Dir string `json:"dir"`
	// Files lists every file of the checkpoint, with its size and digest.
	Files []CheckpointFile `json:"files"`
	// CreatedAt is when the state was saved.
	CreatedAt time.Time `json:"created_at"`
	// Runtime is the driver's name (Driver.Name) that can restore it.
	Runtime string `json:"runtime"`
	// MemoryMiB and CPUs are the execution's size; a restore has the same.
	MemoryMiB int `json:"memory_mib"`
	CPUs      int `json:"cpus"`
	// Kernel is the guest kernel the state runs (empty when the runtime
	// shares the host's).
	Kernel string `json:"kernel,omitempty"`
}

// CheckpointFile is one file of a checkpoint.
type CheckpointFile struct {
	// Name is the file's name in the checkpoint directory (no slashes).
	Name string `json:"name"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// SHA256 is the file's digest as computed by FileDigest (hex).
	SHA256 string `json:"sha256"`
}

// File returns the entry called name, or nil.
func (cp *Checkpoint) File(name string) *CheckpointFile {
	for i := range cp.Files {
		if cp.Files[i].Name == name {
			return &cp.Files[i]
		}
	}
	return nil
}

// WriteManifest writes cp as Dir/CheckpointManifest.
func (cp *Checkpoint) WriteManifest() error {
	b, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cp.Dir, CheckpointManifest), b, 0o600); err != nil {
		return fmt.Errorf("checkpoint %s: write manifest: %w", cp.Dir, err)
	}
	return nil
}

// maxManifestBytes bounds a checkpoint manifest read from disk.
const maxManifestBytes = 1 << 20

// ReadCheckpoint reads the manifest of the checkpoint in dir. It checks the
// manifest's form, not the files (Restore does).
func ReadCheckpoint(dir string) (*Checkpoint, error) {
	f, err := os.Open(filepath.Join(dir, CheckpointManifest))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("checkpoint %s: %w: no %s", dir, errdefs.ErrNotFound, CheckpointManifest)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: read manifest: %w", dir, err)
	}
	return parseCheckpoint(dir, b)
}

// parseCheckpoint decodes and checks the manifest b of the checkpoint in dir.
func parseCheckpoint(dir string, b []byte) (*Checkpoint, error) {
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("checkpoint %s: %w: manifest larger than %d bytes", dir, errdefs.ErrInvalidArgument, maxManifestBytes)
	}
	var cp Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w: manifest: %v", dir, errdefs.ErrInvalidArgument, err)
	}
	cp.Dir = dir
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	return &cp, nil
}

// Validate checks the form of every field: a clean directory, plain and
// unique file names, hex digests.
func (cp *Checkpoint) Validate() error {
	if err := ValidHostPath("checkpoint dir", cp.Dir); err != nil {
		return err
	}
	if len(cp.Files) == 0 || len(cp.Files) > 64 {
		return fmt.Errorf("%w: checkpoint %s: %d files, want 1 to 64", errdefs.ErrInvalidArgument, cp.Dir, len(cp.Files))
	}
	seen := map[string]bool{}
	for _, f := range cp.Files {
		if f.Name == "" || f.Name == "." || f.Name == ".." || strings.ContainsAny(f.Name, "/\x00") || len(f.Name) > 128 || seen[f.Name] {
			return fmt.Errorf("%w: checkpoint %s: file name %q: want a unique plain name", errdefs.ErrInvalidArgument, cp.Dir, f.Name)
		}
		seen[f.Name] = true
		if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("%w: checkpoint %s: file %s: digest %q is not 64 hex digits", errdefs.ErrInvalidArgument, cp.Dir, f.Name, f.SHA256)
		}
		if f.Size < 0 {
			return fmt.Errorf("%w: checkpoint %s: file %s: negative size", errdefs.ErrInvalidArgument, cp.Dir, f.Name)
		}
	}
	if cp.MemoryMiB < 0 || cp.CPUs < 0 {
		return fmt.Errorf("%w: checkpoint %s: negative size", errdefs.ErrInvalidArgument, cp.Dir)
	}
	return nil
}

// DescribeFile opens Dir/name and returns its checkpoint entry.
func DescribeFile(dir, name string) (CheckpointFile, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return CheckpointFile{}, fmt.Errorf("checkpoint file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return CheckpointFile{}, err
	}
	sum, err := FileDigest(f)
	if err != nil {
		return CheckpointFile{}, fmt.Errorf("checkpoint file %s: %w", f.Name(), err)
	}
	return CheckpointFile{Name: name, Size: fi.Size(), SHA256: sum}, nil
}

// OpenVerified opens the checkpoint's file called name read-only, checks its
// size and digest against the manifest entry, and returns it positioned at
// its start. A file missing from the manifest, of another size or digest is
// refused with an error of class FailedPrecondition naming the file. The caller hands
// the verified descriptor itself to whatever reads the file, so a path
// swapped after the check is not read; the checkpoint directory must still be
// writable by the host alone.
func (cp *Checkpoint) OpenVerified(name string) (*os.File, error) {
	return cp.OpenVerifiedKnown(name, nil)
}

// OpenVerifiedKnown is OpenVerified that skips reading a file known holds as
// verified with the manifest's digest and unchanged since (same device,
// inode, size, modification and change times), and records in known a file
// it hashed. A nil known hashes every time.
func (cp *Checkpoint) OpenVerifiedKnown(name string, known *VerifiedFiles) (*os.File, error) {
	want := cp.File(name)
	if want == nil {
		return nil, fmt.Errorf("%w: checkpoint %s: file %s is not in the manifest", errdefs.ErrFailedPrecondition, cp.Dir, name)
	}
	path := filepath.Join(cp.Dir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: checkpoint file %s: %v", errdefs.ErrFailedPrecondition, path, err)
	}
	var before unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &before); err != nil || before.Mode&unix.S_IFMT != unix.S_IFREG || before.Size != want.Size {
		f.Close()
		return nil, fmt.Errorf("%w: checkpoint file %s: not a regular file of %d bytes (corrupted or replaced; take a new checkpoint)", errdefs.ErrFailedPrecondition, path, want.Size)
	}
	key := verifiedKeyOf(&before)
	if known.has(key, want.SHA256) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
	start := known.clock()
	sum, err := FileDigest(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint file %s: %w", path, err)
	}
	if sum != want.SHA256 {
		f.Close()
		return nil, fmt.Errorf("%w: checkpoint file %s: sha256 %s, manifest says %s (corrupted or tampered; refusing to load it)", errdefs.ErrFailedPrecondition, path, sum, want.SHA256)
	}
	known.record(f, key, sum, start)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// VerifiedFiles remembers checkpoint files whose digest was checked, so
// that restoring from one checkpoint again (a template snapshot restored for
// every new VM) does not read all of its RAM and disk again: a restore then
// maps the RAM file without touching its pages. The zero value is ready;
// it is safe for concurrent use.
//
// A file is known by its device, inode, size and its modification and
// change times: any write, truncation, clone into it or mapping written
// through sets the change time (which no caller can set back), so a changed
// file is hashed again. The change time has the granularity of the kernel's
// coarse clock, so a file is recorded only when its last change is older
// than the start of its hashing by Settle: a later change then has a later
// change time.
type VerifiedFiles struct {
	// Settle is that margin; 0 means defaultVerifiedSettle.
	Settle time.Duration
	// now is time.Now; a test seam.
	now func() time.Time

	mu     sync.Mutex
	files  map[verifiedKey]string
	hits   atomic.Uint64
	hashed atomic.Uint64
}

// defaultVerifiedSettle is VerifiedFiles.Settle by default: far above a
// tick of the coarse clock.
const defaultVerifiedSettle = time.Second

// maxVerifiedFiles bounds what VerifiedFiles holds; when full it starts
// afresh (files of removed checkpoints are never looked up again).
const maxVerifiedFiles = 4096

// verifiedKey is the identity and last change of a file.
type verifiedKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func verifiedKeyOf(st *unix.Stat_t) verifiedKey {
	return verifiedKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// clock returns the time a hash starts.
func (v *VerifiedFiles) clock() time.Time {
	if v == nil || v.now == nil {
		return time.Now()
	}
	return v.now()
}

// Counts returns how many files were found known and how many were hashed.
func (v *VerifiedFiles) Counts() (hits, hashed uint64) {
	return v.hits.Load(), v.hashed.Load()
}

// has reports whether the file of key was verified with digest sum.
func (v *VerifiedFiles) has(key verifiedKey, sum string) bool {
	if v == nil {
		return false
	}
	v.mu.Lock()
	got, ok := v.files[key]
	v.mu.Unlock()
	if ok && got == sum {
		v.hits.Add(1)
		return true
	}
	v.hashed.Add(1)
	return false
}

// record remembers f, of key before hashing from start, as having digest
// sum, if it did not change while hashed and had settled before.
func (v *VerifiedFiles) record(f *os.File, key verifiedKey, sum string, start time.Time) {
	if v == nil {
		return
	}
	var after unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &after); err != nil || verifiedKeyOf(&after) != key {
		return
	}
	settle := v.Settle
	if settle == 0 {
		settle = defaultVerifiedSettle
	}
	if time.Unix(key.ctime.Unix()).After(start.Add(-settle)) {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.files == nil || len(v.files) >= maxVerifiedFiles {
		v.files = map[verifiedKey]string{}
	}
	v.files[key] = sum
}

// FileDigest returns the hex SHA-256 of f's data extents: for each extent,
// in order, its offset and length as 8-byte big-endian numbers and then its
// bytes, and finally the file size. Holes (found with SEEK_DATA/SEEK_HOLE)
// are skipped, so a sparse disk image of gigabytes costs only its data; a
// file whose bytes or extent layout change gets another digest. It reads f
// from the start and leaves its offset undefined.
func FileDigest(f *os.File) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	size := fi.Size()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	var hdr [16]byte
	for off := int64(0); off < size; {
		start, err := f.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole remains
		}
		if err != nil {
			return "", fmt.Errorf("seek data: %w", err)
		}
		end, err := f.Seek(start, unix.SEEK_HOLE)
		if err != nil {
			return "", fmt.Errorf("seek hole: %w", err)
		}
		end = min(end, size)
		if end <= start {
			return "", fmt.Errorf("file changed while hashed (extent %d-%d)", start, end)
		}
		binary.BigEndian.PutUint64(hdr[:8], uint64(start))
		binary.BigEndian.PutUint64(hdr[8:], uint64(end-start))
		h.Write(hdr[:])
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			return "", err
		}
		n, err := io.CopyBuffer(h, io.LimitReader(f, end-start), buf)
		if err != nil {
			return "", err
		}
		if n != end-start {
			return "", fmt.Errorf("file shrank while hashed (read %d of %d bytes at %d)", n, end-start, start)
		}
		off = end
	}
	binary.BigEndian.PutUint64(hdr[:8], uint64(size))
	h.Write(hdr[:8])
	return hex.EncodeToString(h.Sum(nil)), nil
}
