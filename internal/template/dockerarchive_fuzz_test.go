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
		err := importDockerArchive(t.Context(), archive, ref, root, io.Discard)
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
	})
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
