package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/envelope"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/progress"
)

// Hibernation to object storage and restore from it. The node-manager turns a
// snapshot into artifact files (privop Export); this node streams each one
// through envelope encryption (a fresh data key per artifact, wrapped by the
// tenant's key) into the object store, and back: download, decrypt and
// authenticate, and write into the node-manager's import staging, which
// checks every file's digest before it rebuilds the snapshot. Plaintext
// never touches the object store, and nothing unauthenticated reaches the
// node-manager's parsers.

// artifactAAD binds an artifact to its tenant and name: an object moved to
// another tenant's or snapshot's key, or renamed, does not decrypt.
func artifactAAD(tenant, scope, name string) string {
	return "space/artifact/v1\x00" + tenant + "\x00" + scope + "\x00" + name
}

// sharedArtifact reports whether an export file is content-addressed and
// shared between a tenant's snapshots, and its key suffix.
func sharedArtifact(exp *privop.Export, name string) (string, bool) {
	switch name {
	case privop.ArtifactBase:
		return "bases/" + exp.BaseID, true
	case privop.ArtifactInitrd:
		return "boot/" + exp.InitrdName, true
	}
	return "", false
}

// Upload stores a snapshot's artifacts in object storage and describes them.
// report (nil: none) receives readings of the plaintext bytes sent, about
// one a second and the last; an artifact already stored (a shared base)
// counts as sent.
func (m *Manager) Upload(ctx context.Context, snapshotID string, req nodev1.UploadSnapshot, report Reporter) (*nodev1.Artifacts, error) {
	if m.cfg.Objects == nil || m.cfg.KMS == nil {
		return nil, fmt.Errorf("%w: this node has no object store or KMS configured", errdefs.ErrFailedPrecondition)
	}
	if err := privop.ValidSnapshotID(snapshotID); err != nil {
		return nil, err
	}
	for _, p := range []string{req.Prefix, req.SharedPrefix} {
		if err := objstore.ValidPrefix(p); err != nil || !strings.HasSuffix(p, "/") {
			return nil, fmt.Errorf("%w: object prefix %q", errdefs.ErrInvalidArgument, p)
		}
	}
	t0 := time.Now()
	exp, err := m.cfg.Privileged.Export(ctx, snapshotID)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(exp)
	if err != nil {
		return nil, err
	}
	out := &nodev1.Artifacts{Export: raw}
	files := append([]privop.ArtifactFile{exp.Base}, exp.Files...)
	if exp.InitrdName != "" {
		files = append(files, privop.ArtifactFile{Name: privop.ArtifactInitrd, Size: -1})
	}
	tr := trackBytes("upload", artifactBytes(files), report)
	for _, f := range files {
		before := tr.Current().Done
		tr.Set(before, f.Name)
		obj, stored, err := m.uploadArtifact(ctx, snapshotID, exp, f, req, tr)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: upload %s: %w", snapshotID, f.Name, err)
		}
		if stored == 0 && f.Size > 0 {
			tr.Set(before+f.Size, "") // already stored: nothing was read
		}
		out.Objects = append(out.Objects, obj)
		failpoint.HibernateAfterPart.Hit()
		if f.Size > 0 {
			out.PlainBytes += f.Size
		}
		out.StoredBytes += stored
	}
	finishBytes(tr)
	m.log.Info("snapshot uploaded", "snapshot", snapshotID, "objects", len(out.Objects),
		"plain_bytes", out.PlainBytes, "stored_bytes", out.StoredBytes, "took", time.Since(t0).Round(time.Millisecond))
	return out, nil
}

// uploadArtifact stores one artifact, unless it is a shared one already
// stored, and returns its object and the bytes written.
func (m *Manager) uploadArtifact(ctx context.Context, snapshotID string, exp *privop.Export, f privop.ArtifactFile, req nodev1.UploadSnapshot, tr *progress.Tracker) (nodev1.Object, int64, error) {
	key, scope := req.Prefix+f.Name, snapshotID
	if suffix, ok := sharedArtifact(exp, f.Name); ok {
		// Shared objects are sealed under one tenant key: a new key
		// (after a revocation) gets objects of its own.
		key, scope = req.SharedPrefix+strings.ToLower(req.KeyID)+"/"+suffix, "shared"
	}
	obj := nodev1.Object{Name: f.Name, Key: key, AAD: artifactAAD(req.Tenant, scope, f.Name)}
	if scope == "shared" {
		if info, err := m.cfg.Objects.Stat(ctx, key); err == nil {
			obj.Size, obj.Digest = info.Size, info.Digest
			return obj, 0, nil
		}
	}
	src, err := m.cfg.Privileged.OpenExportFile(ctx, snapshotID, f.Name)
	if err != nil {
		return obj, 0, err
	}
	defer src.Close()
	pr, pw := io.Pipe()
	plain := sha256.New()
	go func() {
		ew, err := envelope.NewWriter(ctx, pw, m.cfg.KMS, req.KeyID, []byte(obj.AAD))
		if err != nil {
			pw.CloseWithError(err)
			return
		}
		_, err = io.Copy(io.MultiWriter(ew, plain), tr.Reader(src))
		if err == nil {
			err = ew.Close()
		}
		pw.CloseWithError(err)
	}()
	info, err := m.cfg.Objects.Put(ctx, key, pr, -1)
	pr.CloseWithError(errors.New("upload ended"))
	if err != nil {
		return obj, 0, err
	}
	if f.SHA256 != "" && hex.EncodeToString(plain.Sum(nil)) != f.SHA256 {
		_ = m.cfg.Objects.Delete(context.WithoutCancel(ctx), key)
		return obj, 0, fmt.Errorf("artifact %s changed while it was uploaded", f.Name)
	}
	obj.Size, obj.Digest = info.Size, info.Digest
	return obj, info.Size, nil
}

// Download rebuilds a snapshot on this node from its artifacts in object
// storage. A revoked tenant key, a missing or tampered object is refused
// with an error of class FailedPrecondition naming it; nothing of the
// snapshot is left on the node then. report (nil: none) receives readings
// of the plaintext bytes written, about one a second and the last.
func (m *Manager) Download(ctx context.Context, snapshotID string, req nodev1.DownloadSnapshot, report Reporter) (*nodev1.Snapshot, error) {
	if m.cfg.Objects == nil || m.cfg.KMS == nil {
		return nil, fmt.Errorf("%w: this node has no object store or KMS configured", errdefs.ErrFailedPrecondition)
	}
	if err := privop.ValidSnapshotID(snapshotID); err != nil {
		return nil, err
	}
	var exp privop.Export
	if err := json.Unmarshal(req.Artifacts.Export, &exp); err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: artifact description: %v", errdefs.ErrInvalidArgument, snapshotID, err)
	}
	if exp.Snapshot.ID != snapshotID {
		return nil, fmt.Errorf("%w: the artifacts describe snapshot %q, not %s", errdefs.ErrInvalidArgument, exp.Snapshot.ID, snapshotID)
	}
	t0 := time.Now()
	tr := trackBytes("download", artifactBytes(append([]privop.ArtifactFile{exp.Base}, exp.Files...)), report)
	for _, obj := range req.Artifacts.Objects {
		tr.Set(tr.Current().Done, obj.Name)
		if err := m.downloadArtifact(ctx, snapshotID, obj, tr); err != nil {
			return nil, fmt.Errorf("snapshot %s: download %s: %w", snapshotID, obj.Name, err)
		}
	}
	finishBytes(tr)
	info, err := m.cfg.Privileged.SealImport(ctx, &exp)
	if err != nil {
		return nil, err
	}
	m.log.Info("snapshot downloaded", "snapshot", snapshotID, "took", time.Since(t0).Round(time.Millisecond))
	out := snapshotOf(*info)
	return &out, nil
}

// artifactBytes is the plaintext size of the files whose size is known.
func artifactBytes(files []privop.ArtifactFile) int64 {
	var n int64
	for _, f := range files {
		n += max(f.Size, 0)
	}
	return n
}

// finishBytes sends a byte-counted phase's last reading; a file of unknown
// size (an initrd) counts in the total it ends with.
func finishBytes(tr *progress.Tracker) {
	tr.Set(tr.Current().Done, "")
	if r := tr.Current(); r.Done > r.Total {
		tr.SetTotal(r.Done)
	}
	tr.Finish()
}

// downloadArtifact decrypts one object into the node-manager's staging.
func (m *Manager) downloadArtifact(ctx context.Context, snapshotID string, obj nodev1.Object, tr *progress.Tracker) error {
	if err := objstore.ValidKey(obj.Key); err != nil {
		return fmt.Errorf("%w: object key %q", errdefs.ErrInvalidArgument, obj.Key)
	}
	rc, info, err := m.cfg.Objects.Get(ctx, obj.Key)
	if errdefs.IsNotFound(err) {
		return fmt.Errorf("%w: object %s is missing from the object store", errdefs.ErrFailedPrecondition, obj.Key)
	}
	if err != nil {
		return err
	}
	defer rc.Close()
	if obj.Size != 0 && info.Size != obj.Size {
		return fmt.Errorf("%w: object %s holds %d bytes, %d were stored", errdefs.ErrFailedPrecondition, obj.Key, info.Size, obj.Size)
	}
	er, err := envelope.NewReader(ctx, rc, m.cfg.KMS, []byte(obj.AAD))
	if err != nil {
		return err
	}
	dst, err := m.cfg.Privileged.CreateImportFile(ctx, snapshotID, obj.Name)
	if err != nil {
		return err
	}
	_, err = io.Copy(dst, tr.Reader(er))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}
