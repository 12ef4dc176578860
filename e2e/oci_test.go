package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// imageFiles are the two layers of the test image: busybox and a file the
// second layer whites out, then a file of its own (zstd when zstd is here).
func imageLayers(t *testing.T) [][]byte {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not installed")
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(add func(tw *tar.Writer)) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		add(tw)
		tw.Close()
		return buf.Bytes()
	}
	file := func(tw *tar.Writer, name string, mode int64, body []byte) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))})
		tw.Write(body)
	}
	dir := func(tw *tar.Writer, name string) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755})
	}
	l1 := mk(func(tw *tar.Writer) {
		dir(tw, "bin/")
		file(tw, "bin/busybox", 0o755, data)
		for _, a := range []string{"sh", "cat", "ls", "id", "pwd", "env"} {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777})
		}
		dir(tw, "etc/")
		file(tw, "etc/gone", 0o644, []byte("lower\n"))
		dir(tw, "srv/")
	})
	l2 := mk(func(tw *tar.Writer) {
		dir(tw, "etc/")
		file(tw, "etc/.wh.gone", 0o644, nil)
		file(tw, "etc/msg", 0o644, []byte("from the image\n"))
	})
	return [][]byte{l1, l2}
}

var imageConfigJSON = map[string]any{
	"User": "0", "Env": []string{"PATH=/bin", "GREETING=hi"}, "WorkingDir": "/srv",
	"Entrypoint": []string{"/bin/sh", "-c"}, "Cmd": []string{"echo started"}, "ExposedPorts": map[string]any{"8080/tcp": map[string]any{}},
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func imageConfigBlob(layers [][]byte) []byte {
	var diff []string
	for _, l := range layers {
		diff = append(diff, "sha256:"+sha(l))
	}
	b, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "config": imageConfigJSON, "rootfs": map[string]any{"type": "layers", "diff_ids": diff}})
	return b
}

// writeOCILayout writes an OCI layout of imageLayers: layer 1 gzip, layer 2
// plain, under an index that names it "e2e:1".
func writeOCILayout(t *testing.T, dir string) {
	layers := imageLayers(t)
	blobs := filepath.Join(dir, "blobs", "sha256")
	os.MkdirAll(blobs, 0o755)
	put := func(b []byte, mt string) map[string]any {
		os.WriteFile(filepath.Join(blobs, sha(b)), b, 0o644)
		return map[string]any{"mediaType": mt, "digest": "sha256:" + sha(b), "size": len(b)}
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(layers[0])
	zw.Close()
	man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": put(imageConfigBlob(layers), "application/vnd.oci.image.config.v1+json"),
		"layers": []any{put(gz.Bytes(), "application/vnd.oci.image.layer.v1.tar+gzip"), put(layers[1], "application/vnd.oci.image.layer.v1.tar")}})
	md := put(man, "application/vnd.oci.image.manifest.v1+json")
	md["annotations"] = map[string]string{"org.opencontainers.image.ref.name": "e2e:1"}
	md["platform"] = map[string]string{"os": "linux", "architecture": "amd64"}
	ix, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{md}})
	os.WriteFile(filepath.Join(dir, "index.json"), ix, 0o644)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}

// writeDockerArchive writes imageLayers as `docker save` does (legacy layout).
func writeDockerArchive(t *testing.T, path string) {
	layers := imageLayers(t)
	cfg := imageConfigBlob(layers)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, b []byte) {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b))})
		tw.Write(b)
	}
	add(sha(cfg)+".json", cfg)
	var names []string
	for i, l := range layers {
		name := strings.Repeat(string(rune('a'+i)), 64) + "/layer.tar"
		add(name, l)
		names = append(names, name)
	}
	mj, _ := json.Marshal([]map[string]any{{"Config": sha(cfg) + ".json", "RepoTags": []string{"e2e:1"}, "Layers": names}})
	add("manifest.json", mj)
	tw.Close()
	os.WriteFile(path, buf.Bytes(), 0o644)
}

// TestTemplateFromImages builds a template from an OCI layout and one from a
// docker archive through the CLI and runs a command in an ns sandbox of
// each: the layers applied in order (the second's whiteout removed the
// first's file) and the image's config at /etc/space/image-config.json.
func TestTemplateFromImages(t *testing.T) {
	in := startServer(t, newDataDir(t))
	defer in.stop()
	work := t.TempDir()
	layout := filepath.Join(work, "layout")
	writeOCILayout(t, layout)
	archive := filepath.Join(work, "image.tar")
	writeDockerArchive(t, archive)

	for name, from := range map[string]string{"from-oci": "oci:" + layout + "#e2e:1", "from-docker": "docker-archive:" + archive} {
		t.Run(name, func(t *testing.T) {
			if _, e, c := in.cli("", "template", "build", name, "--from", from); c != 0 {
				t.Fatalf("template build --from %s: %d %s\n%s", from, c, e, in.logs())
			}
			for _, rt := range []string{"ns", "vm"} {
				if _, err := exec.LookPath("qemu-system-x86_64"); err != nil && rt == "vm" {
					t.Log("vm: QEMU is not installed, ns only")
					continue
				}
				checkImageSandbox(t, in, name, rt)
			}
		})
	}
	// A bad reference fails the build with the layout's images listed.
	if _, e, c := in.cli("", "template", "build", "bad-ref", "--from", "oci:"+layout+"#nope"); c == 0 || !strings.Contains(e, "e2e:1") {
		t.Errorf("build with an unknown ref: exit %d, %q; want a failure listing e2e:1", c, e)
	}
}

// checkImageSandbox runs a command in a sandbox of template name on runtime
// rt: the second layer's file is there, the whited-out one is not, and the
// image config is in the tree.
func checkImageSandbox(t *testing.T, in *instance, name, rt string) {
	t.Helper()
	sb := in.createWith(name, rt)
	defer in.delete(sb.ID)
	if sb.Runtime != rt {
		t.Fatalf("sandbox %s runs on %q, want %s", sb.ID, sb.Runtime, rt)
	}
	res := in.exec(sb.ID, "sh", "-c", "cat /etc/msg; ls /etc/gone 2>&1; cat /etc/space/image-config.json")
	if !strings.HasPrefix(res.Stdout, "from the image\n") || !strings.Contains(res.Stdout, "No such file") {
		t.Errorf("%s sandbox of %s: %+v; want /etc/msg and no /etc/gone", rt, name, res)
	}
	var cfg map[string]any
	if i := strings.IndexByte(res.Stdout, '{'); i < 0 || json.Unmarshal([]byte(res.Stdout[i:]), &cfg) != nil {
		t.Fatalf("image config in the sandbox: %q", res.Stdout)
	}
	for _, k := range []string{"User", "Env", "WorkingDir", "Entrypoint", "Cmd", "ExposedPorts"} {
		if _, ok := cfg[k]; !ok {
			t.Errorf("%s sandbox: image config lacks %s: %v", rt, k, cfg)
		}
	}
}
