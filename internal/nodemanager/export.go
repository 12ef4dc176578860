package nodemanager

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/blockdelta"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/treedelta"
)

// maxImportImage bounds the disk image an import may rebuild.
const maxImportImage = 1 << 40

// Export and import of snapshots, for hibernation to object storage and
// restore on any node.
//
// Export turns a node-local snapshot into artifact files the sandbox manager
// uploads (it reads them through descriptors from OpenExportFile): the
// filesystem as a delta against a base (blockdelta for a VM disk, treedelta
// for an ns tree), the other checkpoint files as they are, and the base
// itself as a stream from nothing, content-addressed, so that a node that
// does not have the same template bytes can rebuild it. Import is the
// reverse: the manager writes the downloaded (decrypted) artifacts through
// descriptors from CreateImportFile, and SealImport verifies every file's
// size and SHA-256 against the export description before it parses any of
// them, then rebuilds the snapshot.
//
// Layout, beside the snapshots in Config.SnapshotDir:
//
//	<id>/export/<artifact>   artifacts of an exported snapshot
//	.bases/<base id>         base streams (one per template content)
//	.import/<id>/<artifact>  artifacts of an import in progress
//	.boot/<name>             boot files (initramfs) restored VMs need

func (s *Server) basesDir() string  { return filepath.Join(s.cfg.SnapshotDir, ".bases") }
func (s *Server) importDir() string { return filepath.Join(s.cfg.SnapshotDir, ".import") }
func (s *Server) bootDir() string   { return filepath.Join(s.cfg.SnapshotDir, ".boot") }

// exportSnapshot writes the artifacts of a node-local snapshot (once; a
// repeated call describes them again) and describes them.
func (s *Server) exportSnapshot(ctx context.Context, a *privop.ExportArgs) (*privop.Export, error) {
	if a == nil {
		return nil, invalid("export: missing arguments")
	}
	dir, err := s.snapshotDir(a.SnapshotID)
	if err != nil {
		return nil, err
	}
	info, err := readSnapshotInfo(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot %s is not on this node", errdefs.ErrNotFound, a.SnapshotID)
	}
	v, err, _ := s.builds.Do("export:"+a.SnapshotID, func() (any, error) {
		return s.buildExport(context.WithoutCancel(ctx), dir, info)
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: export: %w", a.SnapshotID, err)
	}
	return v.(*privop.Export), nil
}

const exportDescription = "export.json"

func (s *Server) buildExport(ctx context.Context, dir string, info *privop.SnapshotInfo) (*privop.Export, error) {
	exp := filepath.Join(dir, "export")
	if b, err := os.ReadFile(filepath.Join(exp, exportDescription)); err == nil {
		var e privop.Export
		if err := json.Unmarshal(b, &e); err == nil {
			return &e, nil
		}
	}
	if err := os.RemoveAll(exp); err != nil {
		return nil, err
	}
	if err := os.Mkdir(exp, 0o700); err != nil {
		return nil, err
	}
	e := &privop.Export{Snapshot: *info}
	var err error
	if s.cfg.ImageRuntimes[info.Runtime] {
		err = s.exportImage(ctx, dir, exp, e)
	} else {
		err = s.exportTree(ctx, exp, e)
	}
	if err != nil {
		os.RemoveAll(exp)
		return nil, err
	}
	failpoint.NodeManagerAfterExportFiles.Hit()
	b, _ := json.Marshal(e)
	if err := os.WriteFile(filepath.Join(exp, exportDescription), b, 0o600); err != nil {
		os.RemoveAll(exp)
		return nil, err
	}
	return e, nil
}

// exportImage exports a vm snapshot: the disk as a block delta against the
// template image, and for a full snapshot every other checkpoint file.
func (s *Server) exportImage(ctx context.Context, dir, exp string, e *privop.Export) error {
	base, err := s.diskImage(ctx, e.Snapshot.Template)
	if err != nil {
		return err
	}
	e.BaseKind = privop.BaseImage
	if e.BaseID, e.Base, err = s.imageBase(ctx, base); err != nil {
		return err
	}
	disk := filepath.Join(dir, snapshotDiskImage)
	if e.Snapshot.Kind == privop.SnapshotFull {
		cpDir := filepath.Join(dir, snapshotCheckpoint)
		cp, err := driver.ReadCheckpoint(cpDir)
		if err != nil {
			return err
		}
		disk = filepath.Join(cpDir, "disk.img")
		for _, f := range append(cp.Files, driver.CheckpointFile{Name: driver.CheckpointManifest}) {
			if f.Name == "disk.img" {
				continue
			}
			af, err := linkArtifact(filepath.Join(cpDir, f.Name), filepath.Join(exp, privop.CheckpointPrefix+f.Name))
			if err != nil {
				return err
			}
			e.Files = append(e.Files, af)
		}
		var meta struct {
			Initrd string `json:"initrd"`
		}
		if b, err := os.ReadFile(filepath.Join(cpDir, "vm.json")); err == nil && json.Unmarshal(b, &meta) == nil && meta.Initrd != "" {
			e.InitrdName = filepath.Base(meta.Initrd)
			if _, err := linkArtifact(meta.Initrd, filepath.Join(exp, privop.ArtifactInitrd)); err != nil {
				return fmt.Errorf("the checkpoint's initramfs: %w", err)
			}
		}
	}
	af, err := writeArtifact(filepath.Join(exp, privop.ArtifactDiskDelta), func(w io.Writer) error {
		bf, err := os.Open(base)
		if err != nil {
			return err
		}
		defer bf.Close()
		df, err := os.Open(disk)
		if err != nil {
			return err
		}
		defer df.Close()
		_, err = blockdelta.Diff(ctx, bf, df, w, blockdelta.Options{BaseID: e.BaseID})
		return err
	})
	if err != nil {
		return err
	}
	e.Files = append(e.Files, af)
	return nil
}

// exportTree exports an ns snapshot: its tree as a delta against the
// template's tree.
func (s *Server) exportTree(ctx context.Context, exp string, e *privop.Export) error {
	if s.cfg.TemplateDir == nil || s.cfg.SnapshotPath == nil {
		return fmt.Errorf("%w: the node-manager cannot locate templates or snapshots", errdefs.ErrFailedPrecondition)
	}
	tpl, err := s.cfg.TemplateDir(e.Snapshot.Template)
	if err != nil {
		return err
	}
	tree, err := s.cfg.SnapshotPath(e.Snapshot.ID)
	if err != nil {
		return err
	}
	e.BaseKind = privop.BaseTree
	if e.BaseID, e.Base, err = s.treeBase(ctx, e.Snapshot.Template, tpl); err != nil {
		return err
	}
	af, err := writeArtifact(filepath.Join(exp, privop.ArtifactTreeDelta), func(w io.Writer) error {
		_, err := treedelta.Diff(ctx, tpl, tree, w)
		return err
	})
	if err != nil {
		return err
	}
	e.Files = append(e.Files, af)
	return nil
}

// imageBase returns the base id of a template image (its content digest)
// and the base stream's file, writing it on first use.
func (s *Server) imageBase(ctx context.Context, image string) (string, privop.ArtifactFile, error) {
	f, err := os.Open(image)
	if err != nil {
		return "", privop.ArtifactFile{}, err
	}
	defer f.Close()
	sum, err := driver.FileDigest(f)
	if err != nil {
		return "", privop.ArtifactFile{}, err
	}
	id := "img-" + sum
	af, err := s.baseFile(id, func(w io.Writer) error {
		empty, err := emptyFile()
		if err != nil {
			return err
		}
		defer empty.Close()
		_, err = blockdelta.Diff(ctx, empty, f, w, blockdelta.Options{BaseID: "empty"})
		return err
	})
	return id, af, err
}

// treeBase returns the base id of a template tree (the digest of its stream
// from nothing) and the stream's file. The id is cached per template
// directory (by inode and change time: templates are replaced, not edited).
func (s *Server) treeBase(ctx context.Context, name, dir string) (string, privop.ArtifactFile, error) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", privop.ArtifactFile{}, err
	}
	cache := filepath.Join(s.basesDir(), fmt.Sprintf("%s.%d.%d.%d", name, st.Ino, st.Ctim.Sec, st.Ctim.Nsec))
	if b, err := os.ReadFile(cache); err == nil && privop.ValidBaseID(string(b)) {
		if af, err := describeArtifact(filepath.Join(s.basesDir(), string(b)), privop.ArtifactBase); err == nil {
			return string(b), af, nil
		}
	}
	if err := os.MkdirAll(s.basesDir(), 0o700); err != nil {
		return "", privop.ArtifactFile{}, err
	}
	tmp, err := os.CreateTemp(s.basesDir(), "tmp-")
	if err != nil {
		return "", privop.ArtifactFile{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	empty, err := os.MkdirTemp(s.basesDir(), "empty-")
	if err != nil {
		return "", privop.ArtifactFile{}, err
	}
	defer os.Remove(empty)
	h := sha256.New()
	if _, err := treedelta.Diff(ctx, empty, dir, io.MultiWriter(tmp, h)); err != nil {
		return "", privop.ArtifactFile{}, fmt.Errorf("template %s: base stream: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		return "", privop.ArtifactFile{}, err
	}
	id := "tree-" + hex.EncodeToString(h.Sum(nil))
	path := filepath.Join(s.basesDir(), id)
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", privop.ArtifactFile{}, err
	}
	af, err := describeArtifact(path, privop.ArtifactBase)
	if err != nil {
		return "", privop.ArtifactFile{}, err
	}
	_ = os.WriteFile(cache, []byte(id), 0o600)
	return id, af, nil
}

// baseFile returns the base stream id, writing it with write on first use.
func (s *Server) baseFile(id string, write func(io.Writer) error) (privop.ArtifactFile, error) {
	path := filepath.Join(s.basesDir(), id)
	if af, err := describeArtifact(path, privop.ArtifactBase); err == nil {
		return af, nil
	}
	if err := os.MkdirAll(s.basesDir(), 0o700); err != nil {
		return privop.ArtifactFile{}, err
	}
	v, err, _ := s.builds.Do("base:"+id, func() (any, error) {
		return writeArtifact(path, write)
	})
	if err != nil {
		return privop.ArtifactFile{}, fmt.Errorf("base %s: %w", id, err)
	}
	af := v.(privop.ArtifactFile)
	af.Name = privop.ArtifactBase
	return af, nil
}

// writeArtifact writes a file through a temporary name (a crash leaves no
// half artifact) and describes it.
func writeArtifact(path string, write func(io.Writer) error) (privop.ArtifactFile, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return privop.ArtifactFile{}, err
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	err = write(cw)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return privop.ArtifactFile{}, err
	}
	return privop.ArtifactFile{Name: filepath.Base(path), Size: cw.n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// linkArtifact makes dst a hard link of src (a reflink copy across
// filesystems) and describes it.
func linkArtifact(src, dst string) (privop.ArtifactFile, error) {
	if err := os.Link(src, dst); err != nil {
		if !errors.Is(err, unix.EXDEV) {
			return privop.ArtifactFile{}, err
		}
		if err := copyFile(src, dst); err != nil {
			return privop.ArtifactFile{}, err
		}
	}
	return describeArtifact(dst, filepath.Base(dst))
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// describeArtifact returns the size and SHA-256 of a regular file.
func describeArtifact(path, name string) (privop.ArtifactFile, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return privop.ArtifactFile{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return privop.ArtifactFile{}, fmt.Errorf("%s is not a regular file", path)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return privop.ArtifactFile{}, err
	}
	return privop.ArtifactFile{Name: name, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// emptyFile returns an open, empty, unlinked regular file: the base of a
// stream from nothing.
func emptyFile() (*os.File, error) {
	f, err := os.CreateTemp("", "space-empty-")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return f, nil
}

// openExportFile returns an exported artifact read-only.
func (s *Server) openExportFile(a *privop.ExportArgs) (*os.File, error) {
	if a == nil {
		return nil, invalid("open export file: missing arguments")
	}
	if err := privop.ValidArtifactName(a.Name); err != nil {
		return nil, err
	}
	dir, err := s.snapshotDir(a.SnapshotID)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "export", exportDescription))
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot %s is not exported", errdefs.ErrFailedPrecondition, a.SnapshotID)
	}
	var e privop.Export
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "export", a.Name)
	if a.Name == privop.ArtifactBase {
		path = filepath.Join(s.basesDir(), e.BaseID)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: snapshot %s has no artifact %s", errdefs.ErrNotFound, a.SnapshotID, a.Name)
	}
	return f, err
}

// importMu serialises the creation of import staging directories.
var importMu sync.Mutex

// createImportFile creates (or truncates) a staging file of an import and
// returns it for writing.
func (s *Server) createImportFile(a *privop.ExportArgs) (*os.File, error) {
	if a == nil {
		return nil, invalid("import file: missing arguments")
	}
	if err := privop.ValidSnapshotID(a.SnapshotID); err != nil {
		return nil, err
	}
	if err := privop.ValidArtifactName(a.Name); err != nil {
		return nil, err
	}
	if s.cfg.SnapshotDir == "" {
		return nil, fmt.Errorf("%w: this node-manager keeps no snapshots", errdefs.ErrFailedPrecondition)
	}
	dir := filepath.Join(s.importDir(), a.SnapshotID)
	importMu.Lock()
	err := os.MkdirAll(dir, 0o700)
	importMu.Unlock()
	if err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, a.Name), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
}

// sealImport verifies the staged artifacts of an import against their
// description and rebuilds the snapshot from them.
func (s *Server) sealImport(ctx context.Context, a *privop.ExportArgs) (*privop.SnapshotInfo, error) {
	if a == nil {
		return nil, invalid("import: missing arguments")
	}
	dir, err := s.snapshotDir(a.SnapshotID)
	if err != nil {
		return nil, err
	}
	if err := a.Export.Validate(a.SnapshotID); err != nil {
		return nil, err
	}
	if info, err := readSnapshotInfo(dir); err == nil {
		return info, nil // imported before
	}
	e := a.Export
	if !s.runtimes()[e.Snapshot.Runtime] {
		return nil, fmt.Errorf("%w: the %s runtime is not on this node", errdefs.ErrFailedPrecondition, e.Snapshot.Runtime)
	}
	staged := filepath.Join(s.importDir(), a.SnapshotID)
	for _, f := range e.Files {
		if err := verifyStaged(staged, f); err != nil {
			return nil, err
		}
	}
	if err := s.removeSnapshot(ctx, a.SnapshotID); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	info := e.Snapshot
	if s.cfg.ImageRuntimes[info.Runtime] {
		err = s.importImage(ctx, staged, dir, e)
	} else {
		err = s.importTree(ctx, staged, e)
	}
	if err == nil {
		failpoint.NodeManagerAfterImport.Hit()
		err = writeSnapshotInfo(dir, &info)
	}
	if err != nil {
		_ = s.removeSnapshot(context.WithoutCancel(ctx), a.SnapshotID)
		return nil, fmt.Errorf("snapshot %s: import: %w", a.SnapshotID, err)
	}
	failpoint.NodeManagerAfterSeal.Hit()
	os.RemoveAll(staged)
	s.log.Info("snapshot imported", "snapshot", a.SnapshotID, "kind", info.Kind, "runtime", info.Runtime)
	return &info, nil
}

// verifyStaged checks a staged artifact's size and digest.
func verifyStaged(dir string, want privop.ArtifactFile) error {
	got, err := describeArtifact(filepath.Join(dir, want.Name), want.Name)
	if err != nil {
		return fmt.Errorf("%w: artifact %s was not staged: %v", errdefs.ErrFailedPrecondition, want.Name, err)
	}
	if got.Size != want.Size || got.SHA256 != want.SHA256 {
		return fmt.Errorf("%w: artifact %s: %d bytes sha256 %s, the export says %d bytes %s (corrupted in transit or storage; refusing it)",
			errdefs.ErrFailedPrecondition, want.Name, got.Size, got.SHA256, want.Size, want.SHA256)
	}
	return nil
}

// localImageBase returns a disk image whose content has base id id: the
// template's own image when its digest matches, else one rebuilt from the
// staged base stream (and kept for later imports).
func (s *Server) localImageBase(ctx context.Context, staged string, e *privop.Export) (string, error) {
	if img, err := s.diskImage(ctx, e.Snapshot.Template); err == nil {
		if f, err := os.Open(img); err == nil {
			sum, derr := driver.FileDigest(f)
			f.Close()
			if derr == nil && "img-"+sum == e.BaseID {
				return img, nil
			}
		}
	}
	rebuilt := filepath.Join(s.basesDir(), e.BaseID+".img")
	if _, err := os.Stat(rebuilt); err == nil {
		return rebuilt, nil
	}
	if err := verifyStaged(staged, e.Base); err != nil {
		return "", fmt.Errorf("the base image is not on this node and %w", err)
	}
	if err := os.MkdirAll(s.basesDir(), 0o700); err != nil {
		return "", err
	}
	empty, err := emptyFile()
	if err != nil {
		return "", err
	}
	defer empty.Close()
	if err := applyImage(ctx, empty, filepath.Join(staged, privop.ArtifactBase), rebuilt, "empty"); err != nil {
		return "", fmt.Errorf("rebuild base image: %w", err)
	}
	return rebuilt, nil
}

// applyImage rebuilds dst from base and the blockdelta stream in file
// stream; dst is removed on failure.
func applyImage(ctx context.Context, base *os.File, stream, dst, baseID string) error {
	r, err := os.Open(stream)
	if err != nil {
		return err
	}
	defer r.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	_, err = blockdelta.Apply(ctx, base, r, out, blockdelta.ApplyOptions{BaseID: baseID, MaxImageSize: maxImportImage})
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// importImage rebuilds a vm snapshot in dir.
func (s *Server) importImage(ctx context.Context, staged, dir string, e *privop.Export) error {
	baseImg, err := s.localImageBase(ctx, staged, e)
	if err != nil {
		return err
	}
	base, err := os.Open(baseImg)
	if err != nil {
		return err
	}
	defer base.Close()
	if e.Snapshot.Kind != privop.SnapshotFull {
		return applyImage(ctx, base, filepath.Join(staged, privop.ArtifactDiskDelta), filepath.Join(dir, snapshotDiskImage), e.BaseID)
	}
	cpDir := filepath.Join(dir, snapshotCheckpoint)
	if err := os.Mkdir(cpDir, 0o700); err != nil {
		return err
	}
	for _, f := range e.Files {
		if name, ok := strings.CutPrefix(f.Name, privop.CheckpointPrefix); ok {
			if err := os.Rename(filepath.Join(staged, f.Name), filepath.Join(cpDir, name)); err != nil {
				return err
			}
		}
	}
	if err := applyImage(ctx, base, filepath.Join(staged, privop.ArtifactDiskDelta), filepath.Join(cpDir, "disk.img"), e.BaseID); err != nil {
		return err
	}
	if err := s.relocateBoot(staged, cpDir, e); err != nil {
		return err
	}
	// The rebuilt disk has the same bytes but perhaps another extent
	// layout, as has a RAM file (staged whole, its holes written: its bytes
	// were verified against the export's digest), and vm.json may name a
	// local initramfs: describe them anew.
	cp, err := driver.ReadCheckpoint(cpDir)
	if err != nil {
		return err
	}
	for i, f := range cp.Files {
		if f.Name == "disk.img" || f.Name == "vm.json" || f.Name == "ram" {
			if cp.Files[i], err = driver.DescribeFile(cpDir, f.Name); err != nil {
				return err
			}
		}
	}
	return cp.WriteManifest()
}

// relocateBoot makes the initramfs a restored VM boots with exist on this
// node: the path in vm.json when it holds the file already, else the staged
// copy moved under .boot (and vm.json pointed at it).
func (s *Server) relocateBoot(staged, cpDir string, e *privop.Export) error {
	metaPath := filepath.Join(cpDir, "vm.json")
	b, err := os.ReadFile(metaPath)
	if err != nil {
		return err
	}
	var meta map[string]any
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("%w: vm.json: %v", errdefs.ErrInvalidArgument, err)
	}
	initrd, _ := meta["initrd"].(string)
	if initrd == "" || e.InitrdName == "" || filepath.Base(initrd) != e.InitrdName {
		return fmt.Errorf("%w: vm.json names initramfs %q, the export %q", errdefs.ErrInvalidArgument, initrd, e.InitrdName)
	}
	if fi, err := os.Stat(initrd); err == nil && fi.Mode().IsRegular() {
		return nil
	}
	if err := os.MkdirAll(s.bootDir(), 0o755); err != nil {
		return err
	}
	local := filepath.Join(s.bootDir(), e.InitrdName)
	if _, err := os.Stat(local); err != nil {
		if err := os.Rename(filepath.Join(staged, privop.ArtifactInitrd), local); err != nil {
			return fmt.Errorf("the checkpoint's initramfs %s is not on this node and was not imported: %w", e.InitrdName, err)
		}
		_ = os.Chmod(local, 0o644)
	}
	meta["initrd"] = local
	out, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	return os.WriteFile(metaPath, out, 0o600)
}

// importVolumePrefix starts the name of an import's scratch volume.
const importVolumePrefix = "import-"

// importTree rebuilds an ns snapshot as a volume snapshot: a clone of the
// base tree with the delta applied.
func (s *Server) importTree(ctx context.Context, staged string, e *privop.Export) error {
	baseTpl, err := s.localTreeBase(ctx, staged, e)
	if err != nil {
		return err
	}
	vol := importVolumePrefix + e.Snapshot.ID
	s.mu.Lock()
	if s.importing == nil {
		s.importing = map[string]bool{}
	}
	s.importing[vol] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.importing, vol)
		s.mu.Unlock()
	}()
	_ = s.cfg.Storage.Delete(ctx, vol)
	root, err := s.cfg.Storage.Clone(ctx, baseTpl, vol)
	if err != nil {
		return err
	}
	defer s.cfg.Storage.Delete(context.WithoutCancel(ctx), vol)
	if err := applyTree(ctx, root, filepath.Join(staged, privop.ArtifactTreeDelta)); err != nil {
		return err
	}
	_, err = s.cfg.Storage.Snapshot(ctx, vol, e.Snapshot.ID)
	return err
}

// localTreeBase returns the template whose tree has base id id: the
// snapshot's template when its base id matches, else a template "base-…"
// built from the staged base stream (and kept for later imports).
func (s *Server) localTreeBase(ctx context.Context, staged string, e *privop.Export) (string, error) {
	if dir, err := s.cfg.TemplateDir(e.Snapshot.Template); err == nil && s.templatePresent(ctx, e.Snapshot.Template) == nil {
		if id, _, err := s.treeBase(ctx, e.Snapshot.Template, dir); err == nil && id == e.BaseID {
			return e.Snapshot.Template, nil
		}
	}
	name := "base-" + strings.TrimPrefix(e.BaseID, "tree-")[:32]
	if s.templatePresent(ctx, name) == nil {
		return name, nil
	}
	if err := verifyStaged(staged, e.Base); err != nil {
		return "", fmt.Errorf("the base tree is not on this node and %w", err)
	}
	_ = s.cfg.Storage.DeleteTemplate(ctx, name)
	dest, err := s.cfg.Storage.CreateTemplate(ctx, name)
	if err != nil {
		return "", err
	}
	if err := applyTree(ctx, dest, filepath.Join(staged, privop.ArtifactBase)); err != nil {
		_ = s.cfg.Storage.DeleteTemplate(ctx, name)
		return "", fmt.Errorf("rebuild base tree: %w", err)
	}
	if err := s.cfg.Storage.SealTemplate(ctx, name); err != nil {
		_ = s.cfg.Storage.DeleteTemplate(ctx, name)
		return "", err
	}
	return name, nil
}

func applyTree(ctx context.Context, dir, stream string) error {
	r, err := os.Open(stream)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = treedelta.Apply(ctx, dir, r, treedelta.Limits{})
	return err
}
