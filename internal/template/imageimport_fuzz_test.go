package template

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/template/imagecfg"
)

// FuzzDockerArchive imports a `docker save` archive whose manifest.json,
// image config and layer are arbitrary bytes. So that the digests the
// import checks can match, "$CONFIG" in the manifest is replaced with the
// config's member name (its digest), "$LAYER" and "$BLOB" with the layer's
// legacy and blob names, and "$DIFFID" in the config with the layer's
// digest; the fuzzer may list the layer several times, so a later copy
// lands on what an earlier one made (symlinks included). Whatever the
// archive holds: no panic, nothing written beside the tree, and an import
// that succeeds leaves an image config the guest can read.
func FuzzDockerArchive(f *testing.F) {
	layer := mkTar(f, ent{typ: tar.TypeDir, name: "etc/", mode: 0o755}, ent{typ: tar.TypeReg, name: "etc/f", body: "x"})
	escape := mkTar(f, ent{typ: tar.TypeSymlink, name: "etc/space", linkname: "../../outside"})
	through := mkTar(f, ent{typ: tar.TypeSymlink, name: "esc", linkname: "/"}, ent{typ: tar.TypeReg, name: "esc/x", body: "x"})
	manifest := []byte(`[{"Config":"$CONFIG","RepoTags":["test/app:1"],"Layers":["$LAYER"]}]`)
	config := []byte(`{"architecture":"amd64","os":"linux","config":{"User":"1000","Env":["A=1"],"WorkingDir":"/w/../app","Cmd":["sh"]},"rootfs":{"type":"layers","diff_ids":["$DIFFID"]}}`)
	f.Add(manifest, config, layer, "")
	f.Add(manifest, config, escape, "test/app:1")
	f.Add([]byte(`[{"Config":"$CONFIG","Layers":["$LAYER","$BLOB"]}]`), []byte(`{"rootfs":{"diff_ids":["$DIFFID","$DIFFID"]}}`), through, "")
	f.Add([]byte(`[{"Config":"../$CONFIG","Layers":["./$LAYER"]},{"Config":"$CONFIG","RepoTags":["a"],"Layers":[]}]`), []byte(`{"rootfs":{"diff_ids":[]}}`), layer, "a")
	f.Add([]byte(`[{"Config":"manifest.json","Layers":["manifest.json"]}]`), []byte(`{}`), []byte{}, "")
	f.Fuzz(func(t *testing.T, manifestJSON, configJSON, layerTar []byte, ref string) {
		diffID := digestOf(layerTar)
		configJSON = bytes.ReplaceAll(configJSON, []byte("$DIFFID"), []byte(diffID))
		cfgName := strings.TrimPrefix(digestOf(configJSON), "sha256:") + ".json"
		blobName := "blobs/sha256/" + strings.TrimPrefix(diffID, "sha256:")
		manifestJSON = []byte(strings.NewReplacer("$CONFIG", cfgName, "$LAYER", "l/layer.tar", "$BLOB", blobName).Replace(string(manifestJSON)))
		archive := filepath.Join(memTempDir(t), "image.tar")
		if err := os.WriteFile(archive, tarMembers(t, "manifest.json", manifestJSON, cfgName, configJSON, "l/layer.tar", layerTar, blobName, layerTar), 0o644); err != nil {
			t.Fatal(err)
		}
		root, outside := sandboxDirs(t)
		if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		checkImport(t, root, outside, importDockerArchive(t.Context(), archive, ref, root, io.Discard))
	})
}

// FuzzOCIImport imports an OCI image layout whose index.json, image
// manifest, config and layer are arbitrary bytes, the blobs of the last
// three stored under their digests. So that descriptors can name them,
// "$MANIFEST" and "$MANIFESTSIZE" in the index are replaced with the
// manifest's digest and size, "$CONFIG", "$CONFIGSIZE", "$LAYER" and
// "$LAYERSIZE" in the manifest likewise, and "$DIFFID" in the config with
// the layer's digest. The same properties as FuzzDockerArchive.
func FuzzOCIImport(f *testing.F) {
	layer := mkTar(f, ent{typ: tar.TypeDir, name: "etc/", mode: 0o755}, ent{typ: tar.TypeReg, name: "etc/f", body: "x"})
	escape := mkTar(f, ent{typ: tar.TypeSymlink, name: "etc/space", linkname: "../../outside"})
	index := []byte(`{"schemaVersion":2,"manifests":[{"mediaType":"` + mediaOCIManifest + `","digest":"$MANIFEST","size":$MANIFESTSIZE,"annotations":{"org.opencontainers.image.ref.name":"v1"}}]}`)
	manifest := []byte(`{"schemaVersion":2,"mediaType":"` + mediaOCIManifest + `","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"$CONFIG","size":$CONFIGSIZE},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"$LAYER","size":$LAYERSIZE}]}`)
	config := []byte(`{"architecture":"amd64","os":"linux","config":{"User":"1000","Env":["A=1"],"Entrypoint":["sh"]},"rootfs":{"type":"layers","diff_ids":["$DIFFID"]}}`)
	f.Add(index, manifest, config, layer, "")
	f.Add(index, manifest, config, escape, "v1")
	f.Add(index, []byte(`{"config":{"digest":"$CONFIG","size":$CONFIGSIZE},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"$LAYER","size":$LAYERSIZE},{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"$LAYER","size":-1}]}`), []byte(`{"rootfs":{"diff_ids":["$DIFFID","$DIFFID"]}}`), layer, "v1")
	f.Add([]byte(`{"manifests":[{"mediaType":"`+mediaOCIIndex+`","digest":"$MANIFEST","size":$MANIFESTSIZE}]}`), []byte(`{"manifests":[{"mediaType":"`+mediaOCIIndex+`","digest":"$MANIFEST","size":1}]}`), config, layer, "")
	f.Fuzz(func(t *testing.T, indexJSON, manifestJSON, configJSON, layerTar []byte, ref string) {
		configJSON = bytes.ReplaceAll(configJSON, []byte("$DIFFID"), []byte(digestOf(layerTar)))
		manifestJSON = []byte(strings.NewReplacer("$CONFIGSIZE", itoa(len(configJSON)), "$CONFIG", digestOf(configJSON),
			"$LAYERSIZE", itoa(len(layerTar)), "$LAYER", digestOf(layerTar)).Replace(string(manifestJSON)))
		indexJSON = []byte(strings.NewReplacer("$MANIFESTSIZE", itoa(len(manifestJSON)), "$MANIFEST", digestOf(manifestJSON)).Replace(string(indexJSON)))
		dir := filepath.Join(memTempDir(t), "layout")
		blobs := filepath.Join(dir, "blobs", "sha256")
		if err := os.MkdirAll(blobs, 0o755); err != nil {
			t.Fatal(err)
		}
		files := map[string][]byte{filepath.Join(dir, "oci-layout"): []byte(`{"imageLayoutVersion":"1.0.0"}`), filepath.Join(dir, "index.json"): indexJSON}
		for _, b := range [][]byte{manifestJSON, configJSON, layerTar} {
			files[filepath.Join(blobs, strings.TrimPrefix(digestOf(b), "sha256:"))] = b
		}
		for p, b := range files {
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		root, outside := sandboxDirs(t)
		if err := os.WriteFile(filepath.Join(outside, "victim"), []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		checkImport(t, root, outside, importOCI(t.Context(), dir, ref, root, io.Discard))
	})
}

// checkImport fails t when an image import into root (err its result)
// changed anything beside it: outside must hold only its file victim, with
// its content, and their parent only the two; and, when the import
// succeeded, when the tree's image config does not read back.
func checkImport(t *testing.T, root, outside string, err error) {
	t.Helper()
	if got, rerr := os.ReadFile(filepath.Join(outside, "victim")); rerr != nil || string(got) != "keep" {
		t.Fatalf("outside/victim = %q, %v", got, rerr)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("outside holds %v; want only victim", entries)
	}
	if entries, _ := os.ReadDir(filepath.Dir(outside)); len(entries) != 2 {
		t.Fatalf("entries beside the root: %v", entries)
	}
	if err != nil {
		return
	}
	if _, err := imagecfg.Read(root); err != nil {
		t.Fatalf("imported, but the image config does not read back: %v", err)
	}
}

// tarMembers is a tar of regular files, given as name, data pairs.
func tarMembers(t testing.TB, pairs ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := 0; i+1 < len(pairs); i += 2 {
		name, data := pairs[i].(string), pairs[i+1].([]byte)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
