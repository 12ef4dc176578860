package template

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// FuzzOCIIndex feeds arbitrary bytes as index.json and as the one blob the
// layout holds (a nested index, a manifest or a config, whichever a
// descriptor names): parsing and selection either pick a manifest the
// layout really holds or fail with ErrInvalidArgument, never panic or
// read outside blobs/.
func FuzzOCIIndex(f *testing.F) {
	blob := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` + sixtyFour + `","size":2,"platform":{"os":"linux","architecture":"amd64"}}]}`)
	d := digestOf(blob)
	f.Add([]byte(`{"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"`+d+`","size":`+itoa(len(blob))+`,"annotations":{"org.opencontainers.image.ref.name":"a"}}]}`), blob, "a")
	f.Add([]byte(`{"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:../../x","size":1}]}`), []byte("{}"), "")
	f.Add([]byte(`{"manifests":[]}`), []byte(""), "sha256:"+sixtyFour)
	f.Fuzz(func(t *testing.T, indexJSON, blobData []byte, ref string) {
		dir := memTempDir(t)
		os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755)
		name := digestOf(blobData)[len("sha256:"):]
		os.WriteFile(filepath.Join(dir, "blobs", "sha256", name), blobData, 0o644)
		ix, err := parseIndexJSON(indexJSON)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("parse error %v is not ErrInvalidArgument", err)
			}
			return
		}
		got, err := selectManifest(ociDir(dir), ix, ref)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("select error %v is neither ErrInvalidArgument nor a missing blob", err)
			}
			return
		}
		if got.MediaType != mediaOCIManifest && got.MediaType != mediaDockerManifest {
			t.Fatalf("selected %+v, not an image manifest", got)
		}
		var m manifest
		if err := readJSON(ociDir(dir), got, "image manifest", &m); err == nil && digestOf(blobData) != got.Digest {
			t.Fatalf("read manifest %s from a blob with another digest", got.Digest)
		}
	})
}

const sixtyFour = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func itoa(n int) string { return strconv.Itoa(n) }

// FuzzApplyLayer applies arbitrary bytes as a layer over a lower layer that
// holds a symlink out of the tree, a directory and a file: whatever the layer
// holds (whiteouts, opaque markers, links, "..") nothing outside the tree is
// written or removed.
func FuzzApplyLayer(f *testing.F) {
	seeds := [][]ent{
		{{typ: tar.TypeReg, name: ".wh.f"}},
		{{typ: tar.TypeReg, name: ".wh..."}},
		{{typ: tar.TypeReg, name: "esc/.wh.victim"}},
		{{typ: tar.TypeReg, name: "esc/.wh..wh..opq"}},
		{{typ: tar.TypeReg, name: "d/.wh..wh..opq"}, {typ: tar.TypeReg, name: "d/n", body: "x"}},
		{{typ: tar.TypeReg, name: "d", body: "file over dir"}},
		{{typ: tar.TypeDir, name: "f/"}, {typ: tar.TypeReg, name: "f/x", body: "x"}},
		{{typ: tar.TypeLink, name: "h", linkname: "esc/victim"}},
		{{typ: tar.TypeReg, name: "../outside/x", body: "x"}},
	}
	for _, s := range seeds {
		f.Add(mkTar(f, s...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		root, outside := sandboxDirs(t)
		os.WriteFile(filepath.Join(outside, "victim"), []byte("keep"), 0o644)
		lower := mkTar(t,
			ent{typ: tar.TypeSymlink, name: "esc", linkname: outside},
			ent{typ: tar.TypeDir, name: "d/", mode: 0o755},
			ent{typ: tar.TypeReg, name: "d/x", body: "x"},
			ent{typ: tar.TypeReg, name: "f", body: "x"})
		lim := Limits{MaxBytes: 1 << 20, MaxEntries: 100}
		if _, err := ExtractLayer(t.Context(), bytes.NewReader(lower), root, lim); err != nil {
			t.Fatal(err)
		}
		_, _ = ExtractLayer(t.Context(), bytes.NewReader(data), root, lim)
		if got, err := os.ReadFile(filepath.Join(outside, "victim")); err != nil || string(got) != "keep" {
			t.Fatalf("outside/victim = %q, %v", got, err)
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 1 {
			t.Fatalf("outside holds %v; want only victim", entries)
		}
		if entries, _ := os.ReadDir(filepath.Dir(outside)); len(entries) != 2 {
			t.Fatalf("entries beside the root: %v", entries)
		}
	})
}
