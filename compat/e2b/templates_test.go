package e2b_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/testenv/devserver"
)

// TestE2BTemplateBuild runs templates.mjs (Template.build through /e2b:
// steps, uploads, logs, readyCmd, BuildError with the step, refusals) with
// the published SDK on ns sandboxes.
func TestE2BTemplateBuild(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the all-in-one server starts the root node-manager; run as root (CI does)")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: scripts/deps.sh test installs Node.js and npm (make test runs it)", tool)
		}
	}
	modules := installSDK(t)
	work := t.TempDir()
	for _, name := range []string{"lib.mjs", "package.json", "templates.mjs"} {
		copyFile(t, name, filepath.Join(work, name))
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(t.TempDir(), "layout")
	writeOCILayout(t, layout)
	t.Setenv("E2B_OCI_LAYOUT", layout)
	// The same image under another path (which the script then changes).
	layoutCopy := filepath.Join(t.TempDir(), "copy")
	writeOCILayout(t, layoutCopy)
	t.Setenv("E2B_OCI_LAYOUT_COPY", layoutCopy)
	srv := startServer(t, devserver.Build(t), "ns")
	srv.runScript(t, work, "templates.mjs")
}

// writeOCILayout writes an OCI image layout of one layer, busybox as
// /bin/sh, cat and mkdir, and /etc/msg, under the ref name "compat:1", for fromImage.
func writeOCILayout(t *testing.T, dir string) {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("busybox is not installed (scripts/deps.sh test installs it)")
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))},
		{Typeflag: tar.TypeSymlink, Name: "bin/sh", Linkname: "busybox", Mode: 0o777},
		{Typeflag: tar.TypeSymlink, Name: "bin/cat", Linkname: "busybox", Mode: 0o777},
		// The builder makes /etc/space for the image config with mkdir.
		{Typeflag: tar.TypeSymlink, Name: "bin/mkdir", Linkname: "busybox", Mode: 0o777},
		{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755},
		{Typeflag: tar.TypeReg, Name: "etc/msg", Mode: 0o644, Size: int64(len("from the image\n"))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case "bin/busybox":
			tw.Write(data)
		case "etc/msg":
			tw.Write([]byte("from the image\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	sha := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(b []byte, mt string) map[string]any {
		if err := os.WriteFile(filepath.Join(blobs, sha(b)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return map[string]any{"mediaType": mt, "digest": "sha256:" + sha(b), "size": len(b)}
	}
	cfg, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + sha(layer.Bytes())}}})
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": put(cfg, "application/vnd.oci.image.config.v1+json"),
		"layers": []any{put(layer.Bytes(), "application/vnd.oci.image.layer.v1.tar")}})
	md := put(man, "application/vnd.oci.image.manifest.v1+json")
	md["annotations"] = map[string]string{"org.opencontainers.image.ref.name": "compat:1"}
	ix, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{md}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), ix, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
}
