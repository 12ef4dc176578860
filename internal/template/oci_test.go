package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/template/imagecfg"
)

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// testLayer is a layer for test images: its tar entries and compression.
type testLayer struct {
	ents []ent
	comp string // "", "gzip", "zstd"
}

func compress(t testing.TB, data []byte, comp string) ([]byte, string) {
	t.Helper()
	switch comp {
	case "gzip":
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(data)
		zw.Close()
		return buf.Bytes(), "application/vnd.oci.image.layer.v1.tar+gzip"
	case "zstd":
		cmd := exec.Command("zstd", "-q", "-c")
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("zstd: %v", err)
		}
		return out, "application/vnd.oci.image.layer.v1.tar+zstd"
	}
	return data, "application/vnd.oci.image.layer.v1.tar"
}

// ociLayout writes an OCI image layout under dir, blob by blob.
type ociLayout struct {
	t   testing.TB
	dir string
}

func newLayout(t testing.TB) ociLayout {
	dir := filepath.Join(memTempDir(t), "layout")
	os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755)
	os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	return ociLayout{t: t, dir: dir}
}

func (l ociLayout) blob(data []byte, mediaType string) descriptor {
	d := descriptor{MediaType: mediaType, Digest: digestOf(data), Size: int64(len(data))}
	if err := os.WriteFile(filepath.Join(l.dir, "blobs", "sha256", strings.TrimPrefix(d.Digest, "sha256:")), data, 0o644); err != nil {
		l.t.Fatal(err)
	}
	return d
}

func (l ociLayout) jsonBlob(v any, mediaType string) descriptor {
	data, err := json.Marshal(v)
	if err != nil {
		l.t.Fatal(err)
	}
	return l.blob(data, mediaType)
}

// image writes config and layers and returns the manifest's descriptor.
func (l ociLayout) image(cfg *ociConfig, layers ...testLayer) descriptor {
	var descs []descriptor
	var diffIDs []string
	for _, tl := range layers {
		plain := mkTar(l.t, tl.ents...)
		diffIDs = append(diffIDs, digestOf(plain))
		data, mt := compress(l.t, plain, tl.comp)
		descs = append(descs, l.blob(data, mt))
	}
	config := map[string]any{"architecture": "amd64", "os": "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}}
	if cfg != nil {
		config["config"] = cfg
	}
	cd := l.jsonBlob(config, "application/vnd.oci.image.config.v1+json")
	return l.jsonBlob(map[string]any{"schemaVersion": 2, "mediaType": mediaOCIManifest, "config": cd, "layers": descs}, mediaOCIManifest)
}

func (l ociLayout) index(descs ...descriptor) {
	data, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaOCIIndex, "manifests": descs})
	os.WriteFile(filepath.Join(l.dir, "index.json"), data, 0o644)
}

func withRef(d descriptor, ref string) descriptor {
	d.Annotations = map[string]string{refNameAnnotation: ref}
	return d
}

func withPlatform(d descriptor, arch string) descriptor {
	d.Platform = &platform{OS: "linux", Architecture: arch}
	return d
}

// treeLayers are the layers of the layered-tree tests: whiteouts, an opaque
// directory, a symlink, a file replaced by a directory and a directory
// replaced by a file.
var treeLayers = []testLayer{
	{comp: "gzip", ents: []ent{
		{typ: tar.TypeDir, name: "etc/", mode: 0o755},
		{typ: tar.TypeReg, name: "etc/a", body: "one"},
		{typ: tar.TypeReg, name: "gone", body: "x"},
		{typ: tar.TypeDir, name: "opt/", mode: 0o755},
		{typ: tar.TypeReg, name: "opt/old1", body: "x"},
		{typ: tar.TypeDir, name: "opt/olddir/", mode: 0o755},
		{typ: tar.TypeReg, name: "opt/olddir/f", body: "x"},
		{typ: tar.TypeReg, name: "x", body: "was a file"},
		{typ: tar.TypeDir, name: "d/", mode: 0o755},
		{typ: tar.TypeReg, name: "d/f", body: "x"},
		{typ: tar.TypeSymlink, name: "lnk", linkname: "etc/a"},
	}},
	{comp: "zstd", ents: []ent{
		{typ: tar.TypeReg, name: ".wh.gone"},
		{typ: tar.TypeDir, name: "opt/", mode: 0o755},
		{typ: tar.TypeReg, name: "opt/new", body: "new"},
		{typ: tar.TypeReg, name: "opt/olddir/deep", body: "kept"},
		{typ: tar.TypeReg, name: "opt/.wh..wh..opq"},
		{typ: tar.TypeDir, name: "x/", mode: 0o755},
		{typ: tar.TypeReg, name: "x/inside", body: "now a dir"},
	}},
	{ents: []ent{
		{typ: tar.TypeReg, name: "etc/a", body: "two"},
		{typ: tar.TypeReg, name: "d", body: "was a dir"},
		{typ: tar.TypeReg, name: "etc/.wh.missing"},
		{typ: tar.TypeLink, name: "hard", linkname: "opt/new"},
	}},
}

var treeConfig = &ociConfig{
	User: "1000:1000", Env: []string{"PATH=/usr/bin:/bin", "GREETING=hi"}, WorkingDir: "/srv",
	Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"echo started"},
	ExposedPorts: map[string]struct{}{"8080/tcp": {}}, Labels: map[string]string{"org.example": "yes"},
}

// checkLayeredTree checks the tree treeLayers give and its image config.
func checkLayeredTree(t *testing.T, dest string) {
	t.Helper()
	files := map[string]string{"etc/a": "two", "opt/new": "new", "x/inside": "now a dir", "opt/olddir/deep": "kept", "d": "was a dir", "hard": "new", "etc/hostname": Hostname + "\n"}
	for rel, want := range files {
		got, err := os.ReadFile(filepath.Join(dest, rel))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", rel, got, err, want)
		}
	}
	for _, rel := range []string{"gone", "opt/old1", "opt/olddir/f", ".wh.gone", "opt/.wh..wh..opq", "etc/.wh.missing", "etc/missing"} {
		if _, err := os.Lstat(filepath.Join(dest, rel)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v; want it removed (whiteout or opaque dir)", rel, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(dest, "lnk")); err != nil || target != "etc/a" {
		t.Errorf("lnk -> %q, %v; want etc/a", target, err)
	}
	fi, err := os.Stat(filepath.Join(dest, ImageConfigPath))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("image config: %v %v; want a 0644 file", fi, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && (!ok || st.Uid != 0 || st.Gid != 0) {
		t.Errorf("image config owned by %v; want root", fi.Sys())
	}
	data, _ := os.ReadFile(filepath.Join(dest, ImageConfigPath))
	var got ociConfig
	if err := json.Unmarshal(data, &got); err != nil || !reflect.DeepEqual(&got, treeConfig) {
		t.Errorf("image config = %s (%v); want %+v", data, err, treeConfig)
	}
	var raw map[string]any
	json.Unmarshal(data, &raw)
	for _, k := range []string{"User", "Env", "WorkingDir", "Entrypoint", "Cmd", "ExposedPorts", "Labels"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("image config lacks field %s: %s", k, data)
		}
	}
}

func TestBuildFromOCILayout(t *testing.T) {
	l := newLayout(t)
	l.index(l.image(treeConfig, treeLayers...))
	dest := filepath.Join(memTempDir(t), "root")
	src, err := ParseSource("oci:" + l.dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := Build(t.Context(), src, dest, nil); err != nil {
		t.Fatal(err)
	}
	checkLayeredTree(t, dest)
}

func TestOCIPlatformAndRef(t *testing.T) {
	l := newLayout(t)
	arch := func(a string) testLayer {
		return testLayer{ents: []ent{{typ: tar.TypeReg, name: "arch", body: a}}}
	}
	amd := withPlatform(l.image(nil, arch("amd64")), "amd64")
	arm := withPlatform(l.image(nil, arch("arm64")), "arm64")
	nested := l.jsonBlob(map[string]any{"schemaVersion": 2, "mediaType": mediaOCIIndex, "manifests": []descriptor{arm, amd}}, mediaOCIIndex)
	other := l.image(nil, arch("other"))
	l.index(withRef(nested, "app:1"), withRef(other, "app:2"))
	saved := hostPlatform
	hostPlatform = platform{OS: "linux", Architecture: "amd64"}
	t.Cleanup(func() { hostPlatform = saved })
	for _, tc := range []struct{ ref, want, err string }{
		{ref: "app:1", want: "amd64"},
		{ref: "app:2", want: "other"},
		{ref: arm.Digest, want: "arm64"},
		{ref: "", err: "2 images match"},
		{ref: "app:3", err: `no image named "app:3"`},
	} {
		dest := filepath.Join(memTempDir(t), "root")
		err := Build(t.Context(), Source{Kind: KindOCI, Path: l.dir, Ref: tc.ref}, dest, nil)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "ref app:1") || !strings.Contains(err.Error(), "linux/arm64") || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ref %q: %v; want %q and a list of the layout's images", tc.ref, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ref %q: %v", tc.ref, err)
			continue
		}
		if got, _ := os.ReadFile(filepath.Join(dest, "arch")); string(got) != tc.want {
			t.Errorf("ref %q: got image %q, want %q", tc.ref, got, tc.want)
		}
	}
	// Without a ref, the layout's only host image is taken.
	l.index(withRef(nested, "app:1"))
	dest := filepath.Join(memTempDir(t), "root")
	if err := Build(t.Context(), Source{Kind: KindOCI, Path: l.dir}, dest, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dest, "arch")); string(got) != "amd64" {
		t.Errorf("no ref: got image %q, want amd64", got)
	}
}

func TestOCIWrongDigest(t *testing.T) {
	l := newLayout(t)
	m := l.image(nil, treeLayers[0], testLayer{ents: []ent{{typ: tar.TypeReg, name: "f", body: "original"}}})
	l.index(m)
	var man manifest
	data, _ := os.ReadFile(filepath.Join(l.dir, "blobs", "sha256", strings.TrimPrefix(m.Digest, "sha256:")))
	json.Unmarshal(data, &man)
	// Same length, other content: only the digest tells.
	blob := filepath.Join(l.dir, "blobs", "sha256", strings.TrimPrefix(man.Layers[1].Digest, "sha256:"))
	b, _ := os.ReadFile(blob)
	os.WriteFile(blob, bytes.Replace(b, []byte("original"), []byte("tampered"), 1), 0o644)
	err := Build(t.Context(), Source{Kind: KindOCI, Path: l.dir}, filepath.Join(memTempDir(t), "root"), nil)
	if err == nil || !strings.Contains(err.Error(), "layer 2 of 2 ("+man.Layers[1].Digest+")") || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("tampered layer: %v; want an error naming layer 2 and its digest", err)
	}
}

// TestOCIHostileLayers applies layers that try to reach outside the tree.
func TestOCIHostileLayers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		upper []ent
		want  string
	}{
		{"dotdot", []ent{{typ: tar.TypeReg, name: "../outside/x", body: "x"}}, "leaves the root"},
		{"absolute", []ent{{typ: tar.TypeReg, name: "/etc/passwd", body: "x"}}, "absolute"},
		{"through symlink", []ent{{typ: tar.TypeReg, name: "esc/x", body: "x"}}, "symlink"},
		{"whiteout dotdot", []ent{{typ: tar.TypeReg, name: ".wh..."}}, "names no entry"},
		{"whiteout dot", []ent{{typ: tar.TypeReg, name: "sub/.wh.."}}, "names no entry"},
		{"whiteout through symlink", []ent{{typ: tar.TypeReg, name: "esc/.wh.victim"}}, "symlink"},
		{"opaque through symlink", []ent{{typ: tar.TypeReg, name: "esc/.wh..wh..opq"}}, "symlink"},
		{"huge", []ent{{typ: tar.TypeReg, name: "big", body: strings.Repeat("x", 2048)}}, "bytes of files"},
		{"huge header", nil, "archive entry 0"},
		{"device", []ent{{typ: tar.TypeChar, name: "null"}, {typ: tar.TypeReg, name: "ok", body: "x"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, outside := sandboxDirs(t)
			os.WriteFile(filepath.Join(outside, "victim"), []byte("keep"), 0o644)
			lower := layer{what: "lower", open: tarOpener(mkTar(t,
				ent{typ: tar.TypeSymlink, name: "esc", linkname: outside},
				ent{typ: tar.TypeDir, name: "sub/", mode: 0o755}))}
			upperTar := mkTar(t, tc.upper...)
			if tc.upper == nil {
				upperTar = hugePAXHeader(t)
			}
			upper := layer{what: "upper", open: tarOpener(upperTar)}
			lim := Limits{MaxBytes: 1024, MaxEntries: 100}
			_, err := applyLayer(t.Context(), root, lower, lim)
			if err == nil {
				_, err = applyLayer(t.Context(), root, upper, lim)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Lstat(filepath.Join(root, "null")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("device node written: %v", err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v; want %q", err, tc.want)
			}
			if data, err := os.ReadFile(filepath.Join(outside, "victim")); err != nil || string(data) != "keep" {
				t.Fatalf("outside/victim = %q, %v: the layer reached outside the tree", data, err)
			}
			entries, _ := os.ReadDir(outside)
			if len(entries) != 1 {
				t.Fatalf("outside holds %v; want only victim", entries)
			}
		})
	}
}

func tarOpener(data []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }
}

// dockerSave writes a `docker save` archive of the layers: the legacy layout
// (HEX.json, ID/layer.tar) or, with oci, the docker 25+ one (blobs/sha256/…
// plus index.json and oci-layout). tamper changes layer 2's content.
func dockerSave(t *testing.T, oci, tamper bool, cfg *ociConfig, layers ...testLayer) string {
	t.Helper()
	members := map[string][]byte{}
	var order []string
	add := func(name string, data []byte) {
		members[name] = data
		order = append(order, name)
	}
	var diffIDs, names []string
	var descs []descriptor
	for i, tl := range layers {
		plain := mkTar(t, tl.ents...)
		diffIDs = append(diffIDs, digestOf(plain))
		name := hex.EncodeToString([]byte{byte(i), 1, 2, 3}) + "/layer.tar"
		if oci {
			name = "blobs/sha256/" + strings.TrimPrefix(digestOf(plain), "sha256:")
		}
		if tamper && i == 1 {
			plain = bytes.Replace(plain, []byte("original"), []byte("tampered"), 1)
		}
		add(name, plain)
		names = append(names, name)
		descs = append(descs, descriptor{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: diffIDs[i], Size: int64(len(plain))})
	}
	config, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "config": cfg, "rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}})
	cfgName := strings.TrimPrefix(digestOf(config), "sha256:") + ".json"
	if oci {
		cfgName = "blobs/sha256/" + strings.TrimPrefix(digestOf(config), "sha256:")
		man, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": mediaOCIManifest,
			"config": descriptor{MediaType: "application/vnd.oci.image.config.v1+json", Digest: digestOf(config), Size: int64(len(config))}, "layers": descs})
		add("blobs/sha256/"+strings.TrimPrefix(digestOf(man), "sha256:"), man)
		ix, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []descriptor{{MediaType: mediaOCIManifest, Digest: digestOf(man), Size: int64(len(man))}}})
		add("index.json", ix)
		add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	}
	add(cfgName, config)
	mj, _ := json.Marshal([]dockerManifestEntry{{Config: cfgName, RepoTags: []string{"test/app:1"}, Layers: names}})
	add("manifest.json", mj)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range order {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(members[name]))})
		tw.Write(members[name])
	}
	tw.Close()
	p := filepath.Join(memTempDir(t), "image.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDockerArchiveCompressed(t *testing.T) {
	p := filepath.Join(memTempDir(t), "image.tar.gz")
	data, _ := compress(t, mkTar(t, ent{typ: tar.TypeReg, name: "manifest.json", body: "[]"}), "gzip")
	os.WriteFile(p, data, 0o644)
	err := Build(t.Context(), Source{Kind: KindDockerArchive, Path: p}, filepath.Join(memTempDir(t), "root"), nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "decompress it first") {
		t.Fatalf("gzip docker archive: %v; want a clear invalid-argument error", err)
	}
}

func TestBuildFromDockerArchive(t *testing.T) {
	for _, oci := range []bool{false, true} {
		t.Run(map[bool]string{false: "legacy", true: "oci"}[oci], func(t *testing.T) {
			var plain []testLayer
			for _, l := range treeLayers {
				plain = append(plain, testLayer{ents: l.ents})
			}
			p := dockerSave(t, oci, false, treeConfig, plain...)
			for _, ref := range []string{"", "#test/app:1"} {
				src, err := ParseSource("docker-archive:" + p + ref)
				if err != nil {
					t.Fatal(err)
				}
				dest := filepath.Join(memTempDir(t), "root")
				if err := Build(t.Context(), src, dest, nil); err != nil {
					t.Fatal(err)
				}
				checkLayeredTree(t, dest)
			}
			err := Build(t.Context(), Source{Kind: KindDockerArchive, Path: p, Ref: "test/app:2"}, filepath.Join(memTempDir(t), "root"), nil)
			if err == nil || !strings.Contains(err.Error(), "test/app:1") {
				t.Errorf("unknown tag: %v; want an error listing test/app:1", err)
			}
			p = dockerSave(t, oci, true, nil, treeLayers[0], testLayer{ents: []ent{{typ: tar.TypeReg, name: "f", body: "original"}}})
			err = Build(t.Context(), Source{Kind: KindDockerArchive, Path: p}, filepath.Join(memTempDir(t), "root"), nil)
			if err == nil || !strings.Contains(err.Error(), "layer 2 of 2") || !strings.Contains(err.Error(), "digest") {
				t.Errorf("tampered layer: %v; want an error naming layer 2 and its digest", err)
			}
		})
	}
}

// BenchmarkImportOCI500MiB imports a generated image of five gzip layers of
// 100 MiB each (100 files of 1 MiB, half random, half a repeated block, so
// gzip halves it as it does real images); one op is one Build from the
// layout into a fresh directory on disk. Run with -benchtime=1x -count=N.
func BenchmarkImportOCI500MiB(b *testing.B) {
	l := ociLayout{t: b, dir: filepath.Join(b.TempDir(), "layout")}
	os.MkdirAll(filepath.Join(l.dir, "blobs", "sha256"), 0o755)
	os.WriteFile(filepath.Join(l.dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
	rnd := make([]byte, 512<<10)
	var descs []descriptor
	var diffIDs []string
	for i := 0; i < 5; i++ {
		var plain, gz bytes.Buffer
		tw := tar.NewWriter(&plain)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "layer" + strconv.Itoa(i) + "/", Mode: 0o755})
		for j := 0; j < 100; j++ {
			readRandom(rnd)
			body := append(append([]byte{}, rnd...), bytes.Repeat(rnd[:4096], 128)...)
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "layer" + strconv.Itoa(i) + "/f" + strconv.Itoa(j), Mode: 0o644, Size: int64(len(body))})
			tw.Write(body)
		}
		tw.Close()
		diffIDs = append(diffIDs, digestOf(plain.Bytes()))
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
		zw.Write(plain.Bytes())
		zw.Close()
		descs = append(descs, l.blob(gz.Bytes(), "application/vnd.oci.image.layer.v1.tar+gzip"))
	}
	cd := l.jsonBlob(map[string]any{"architecture": "amd64", "os": "linux", "rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}}, "application/vnd.oci.image.config.v1+json")
	l.index(l.jsonBlob(map[string]any{"schemaVersion": 2, "mediaType": mediaOCIManifest, "config": cd, "layers": descs}, mediaOCIManifest))
	parent := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dest := filepath.Join(parent, "root"+strconv.Itoa(i))
		if err := Build(b.Context(), Source{Kind: KindOCI, Path: l.dir}, dest, nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dest)
		b.StartTimer()
	}
	b.SetBytes(500 << 20)
}

func readRandom(p []byte) {
	if _, err := cryptorand.Read(p); err != nil {
		panic(err)
	}
}

// hugePAXHeader returns a tar whose first entry is a 2 MiB PAX header: a
// regular file's block with its type patched to 'x' and its checksum redone
// (tar.Writer will not write one).
func hugePAXHeader(t *testing.T) []byte {
	body := "path=" + strings.Repeat("a", 2<<20)
	body = strconv.Itoa(len(body)+9) + " " + body + "\n"
	data := mkTar(t, ent{typ: tar.TypeReg, name: "x", body: body})
	hdr := data[:512]
	hdr[156] = tar.TypeXHeader
	copy(hdr[148:156], "        ")
	sum := 0
	for _, c := range hdr {
		sum += int(c)
	}
	copy(hdr[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return data
}

// The importer writes what the guest daemon accepts: a WorkingDir as images
// often carry it ("/app/") is cleaned, and a value the guest would ignore
// fails the build instead of a template whose defaults silently do nothing.
func TestImageConfigIsWhatTheGuestReads(t *testing.T) {
	dest := t.TempDir()
	if err := writeImageConfig(dest, &ociConfig{WorkingDir: "/app/", Env: []string{"A=1"}}); err != nil {
		t.Fatal(err)
	}
	got, err := imagecfg.Read(dest)
	if err != nil {
		t.Fatalf("the guest's reader refuses what the importer wrote: %v", err)
	}
	if got.WorkingDir != "/app" || len(got.Env) != 1 {
		t.Fatalf("read back %+v, want WorkingDir /app and Env [A=1]", got)
	}
	err = writeImageConfig(t.TempDir(), &ociConfig{Env: []string{"no equals sign"}})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "Env") {
		t.Fatalf("an Env entry the guest would ignore: %v, want an invalid-argument error naming Env", err)
	}
}
