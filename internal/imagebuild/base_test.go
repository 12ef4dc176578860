package imagebuild

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeArchive writes a docker archive whose manifest names config cfg.
func writeArchive(t *testing.T, file, cfg string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range []struct{ name, body string }{
		{"abc.json", cfg},
		{"manifest.json", `[{"Config":"abc.json","RepoTags":["a:1"],"Layers":[]}]`},
	} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: m.name, Mode: 0o644, Size: int64(len(m.body))})
		tw.Write([]byte(m.body))
	}
	tw.Close()
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestImageSource: FROM oci:DIR[#REF] and docker-archive:FILE[#TAG] are
// read relative to the context or absolute; the identity follows the
// image's content (index.json, manifest and config), not its path, and
// the ref; template names and registry refs are not local images.
func TestImageSource(t *testing.T) {
	ctxDir := t.TempDir()
	layout := filepath.Join(ctxDir, "layout")
	os.MkdirAll(layout, 0o755)
	os.WriteFile(filepath.Join(layout, "index.json"), []byte(`{"manifests":[{"digest":"sha256:11"}]}`), 0o644)
	writeArchive(t, filepath.Join(ctxDir, "img.tar"), `{"rootfs":{"diff_ids":["sha256:aa"]}}`)

	src, id1, ok, err := ImageSource("oci:layout#app:1", ctxDir)
	if err != nil || !ok || src != "oci:"+layout+"#app:1" {
		t.Fatalf("oci:layout#app:1 = %q, %v, %v; want oci:%s#app:1", src, ok, err, layout)
	}
	if src2, id2, _, err := ImageSource("oci:"+layout+"#app:1", "/elsewhere"); err != nil || src2 != src || id2 != id1 {
		t.Errorf("absolute oci path: %q %q %v; want %q %q", src2, id2, err, src, id1)
	}
	if _, id3, _, _ := ImageSource("oci:layout#app:2", ctxDir); id3 == id1 {
		t.Errorf("another ref has the same identity %s", id1)
	}
	os.WriteFile(filepath.Join(layout, "index.json"), []byte(`{"manifests":[{"digest":"sha256:22"}]}`), 0o644)
	if _, id4, _, _ := ImageSource("oci:layout#app:1", ctxDir); id4 == id1 {
		t.Errorf("a changed layout kept identity %s: a stale import would be reused", id1)
	}

	src, a1, ok, err := ImageSource("docker-archive:img.tar", ctxDir)
	if err != nil || !ok || src != "docker-archive:"+filepath.Join(ctxDir, "img.tar") {
		t.Fatalf("docker-archive:img.tar = %q, %v, %v", src, ok, err)
	}
	writeArchive(t, filepath.Join(ctxDir, "img.tar"), `{"rootfs":{"diff_ids":["sha256:bb"]}}`)
	if _, a2, _, err := ImageSource("docker-archive:img.tar", ctxDir); err != nil || a2 == a1 {
		t.Errorf("a changed archive (new config): identity %s, %v; want a new one", a2, err)
	}

	for _, from := range []string{"minimal", "debian:12", "docker.io/library/debian:12"} {
		if _, _, ok, err := ImageSource(from, ctxDir); ok || err != nil {
			t.Errorf("ImageSource(%q) = %v, %v; want not a local image", from, ok, err)
		}
	}
	for from, want := range map[string]string{
		"oci:":                    "want oci:PATH",
		"oci:missing":             "not a readable oci image",
		"docker-archive:nope.tar": "not a readable docker-archive image",
		"docker-archive:layout":   "not a readable docker-archive image",
	} {
		if _, _, ok, err := ImageSource(from, ctxDir); !ok || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ImageSource(%q) = %v, %v; want an error saying %q", from, ok, err, want)
		}
	}
	bad := filepath.Join(ctxDir, "noman.tar")
	os.WriteFile(bad, nil, 0o644)
	if _, _, _, err := ImageSource("docker-archive:noman.tar", ctxDir); err == nil || !strings.Contains(err.Error(), "manifest.json") {
		t.Errorf("an archive without manifest.json: %v", err)
	}
}

// TestBaseName: one name per identity, prefixed.
func TestBaseName(t *testing.T) {
	a, b := BaseName("dfimg-", "x"), BaseName("dfimg-", "y")
	if a == b || !strings.HasPrefix(a, "dfimg-") || len(a) != len("dfimg-")+16 {
		t.Errorf("BaseName: %q %q", a, b)
	}
}
