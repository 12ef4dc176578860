package privop

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// The description of an exported snapshot (hibernation to object storage,
// restore on any node): its artifact files and the base its filesystem
// delta applies to (see internal/nodemanager, export.go).

// Artifact names.
const (
	ArtifactBase      = "base"
	ArtifactDiskDelta = "disk.delta"
	ArtifactTreeDelta = "tree.delta"
	ArtifactInitrd    = "boot.initrd"
	// CheckpointPrefix names a checkpoint file exported as it is
	// ("cp.memory", "cp.checkpoint.json", …).
	CheckpointPrefix = "cp."
)

// Base kinds.
const (
	BaseImage = "image" // a VM disk image, as a blockdelta stream from nothing
	BaseTree  = "tree"  // a directory tree, as a treedelta stream from nothing
)

// ArtifactFile is one exported file.
type ArtifactFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Export describes an exported snapshot: what SealImport needs to rebuild it
// elsewhere.
type Export struct {
	Snapshot SnapshotInfo `json:"snapshot"`
	// BaseKind and BaseID name the base the filesystem delta applies to.
	BaseKind string `json:"base_kind"`
	BaseID   string `json:"base_id"`
	// Base is the base stream's file (Name ArtifactBase).
	Base ArtifactFile `json:"base"`
	// InitrdName is the file name of the initramfs a VM checkpoint boots
	// with (its content hash); the artifact ArtifactInitrd carries it.
	InitrdName string `json:"initrd_name,omitempty"`
	// Files are the snapshot's artifacts (the base and initrd excluded).
	Files []ArtifactFile `json:"files"`
}

// ExportArgs names a snapshot to export or import.
type ExportArgs struct {
	SnapshotID string `json:"snapshot_id"`
	// Name is an artifact name (OpenExportFile, CreateImportFile).
	Name string `json:"name,omitempty"`
	// Export is the description SealImport checks against.
	Export *Export `json:"export,omitempty"`
}

// ValidArtifactName reports whether name may name an artifact file.
func ValidArtifactName(name string) error {
	switch name {
	case ArtifactBase, ArtifactDiskDelta, ArtifactTreeDelta, ArtifactInitrd:
		return nil
	}
	if rest, ok := strings.CutPrefix(name, CheckpointPrefix); ok && rest != "" && len(rest) <= 64 && !strings.ContainsAny(rest, "/\x00") && rest != "." && rest != ".." && !strings.HasPrefix(rest, ".") {
		return nil
	}
	return invalid("artifact name %q is not one of the snapshot artifacts", name)
}

func (e *Export) Validate(id string) error {
	if e == nil {
		return invalid("import: missing export description")
	}
	if e.Snapshot.ID != id {
		return invalid("import: the description is of snapshot %q, not %q", e.Snapshot.ID, id)
	}
	s := e.Snapshot
	if s.Kind != SnapshotDisk && s.Kind != SnapshotFull {
		return invalid("import: snapshot kind %q", s.Kind)
	}
	if !execIDPattern.MatchString(s.SandboxID) || ValidTemplateName(s.Template) != nil || s.Runtime == "" {
		return invalid("import: malformed snapshot description")
	}
	if e.BaseKind != BaseImage && e.BaseKind != BaseTree || !ValidBaseID(e.BaseID) {
		return invalid("import: base %q/%q", e.BaseKind, e.BaseID)
	}
	if e.InitrdName != "" && (strings.ContainsAny(e.InitrdName, "/\x00") || strings.HasPrefix(e.InitrdName, ".") || len(e.InitrdName) > 128) {
		return invalid("import: initrd name %q", e.InitrdName)
	}
	if len(e.Files) == 0 || len(e.Files) > 64 {
		return invalid("import: %d files", len(e.Files))
	}
	seen := map[string]bool{}
	for _, f := range append([]ArtifactFile{e.Base}, e.Files...) {
		if err := ValidArtifactName(f.Name); err != nil {
			return err
		}
		if seen[f.Name] {
			return invalid("import: artifact %s listed twice", f.Name)
		}
		seen[f.Name] = true
		if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != sha256.Size || f.Size < 0 {
			return invalid("import: artifact %s: bad size or digest", f.Name)
		}
	}
	return nil
}

// ValidBaseID: "img-" or "tree-" and 64 hex digits.
func ValidBaseID(id string) bool {
	rest, ok := strings.CutPrefix(id, "img-")
	if !ok {
		rest, ok = strings.CutPrefix(id, "tree-")
	}
	if !ok || len(rest) != 64 {
		return false
	}
	_, err := hex.DecodeString(rest)
	return err == nil && strings.ToLower(rest) == rest
}
