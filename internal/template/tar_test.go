package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// ent is one tar entry for tests.
type ent struct {
	typ      byte
	name     string
	linkname string
	body     string
	mode     int64
	size     int64 // when set, overrides len(body) in the header
}

func mkTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.linkname, Mode: mode, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if e.typ == tar.TypeChar || e.typ == tar.TypeBlock {
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sandboxDirs returns a parent dir with an empty "root" (the destination) and
// an empty "outside" that nothing may touch.
func sandboxDirs(t testing.TB) (root, outside string) {
	parent := memTempDir(t)
	root, outside = filepath.Join(parent, "root"), filepath.Join(parent, "outside")
	for _, d := range []string{root, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root, outside
}

// memTempDir returns a fresh directory on tmpfs when /dev/shm is usable (the
// fuzzer creates thousands; on disk that is I/O bound), else t.TempDir().
func memTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("/dev/shm", "space-template-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func checkOutsideUntouched(t testing.TB, outside string) {
	t.Helper()
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatalf("outside dir: %v", err)
	}
	if len(entries) != 0 {
		t.Fatalf("extraction wrote outside the root: %v", entries)
	}
	parentEntries, _ := os.ReadDir(filepath.Dir(outside))
	if len(parentEntries) != 2 {
		t.Fatalf("extraction created entries beside the root: %v", parentEntries)
	}
}

func TestExtractGood(t *testing.T) {
	root, outside := sandboxDirs(t)
	data := mkTar(t,
		ent{typ: tar.TypeDir, name: "./", mode: 0o755},
		ent{typ: tar.TypeDir, name: "etc/", mode: 0o755},
		ent{typ: tar.TypeReg, name: "etc/os-release", body: "ID=test\n"},
		ent{typ: tar.TypeReg, name: "usr/bin/tool", body: "#!/bin/sh\n", mode: 0o4755},
		ent{typ: tar.TypeSymlink, name: "bin", linkname: "usr/bin"},
		ent{typ: tar.TypeSymlink, name: "etc/abs", linkname: "/etc/os-release"},
		ent{typ: tar.TypeLink, name: "etc/hard", linkname: "etc/os-release"},
		ent{typ: tar.TypeChar, name: "dev/null"},
		ent{typ: tar.TypeFifo, name: "run/fifo"},
		ent{typ: tar.TypeDir, name: "ro/", mode: 0o555},
		ent{typ: tar.TypeReg, name: "ro/file", body: "x"},
		ent{typ: tar.TypeReg, name: "etc/os-release", body: "ID=replaced\n"},
	)
	if err := Extract(t.Context(), bytes.NewReader(data), root, DefaultLimits); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	checkOutsideUntouched(t, outside)
	if b, _ := os.ReadFile(filepath.Join(root, "etc/os-release")); string(b) != "ID=replaced\n" {
		t.Errorf("os-release = %q", b)
	}
	// The hard link was made to the first os-release; replacing os-release
	// unlinks it rather than writing through the link.
	if b, _ := os.ReadFile(filepath.Join(root, "etc/hard")); string(b) != "ID=test\n" {
		t.Errorf("hard link = %q, want the original content", b)
	}
	if got, _ := os.Readlink(filepath.Join(root, "etc/abs")); got != "/etc/os-release" {
		t.Errorf("symlink target = %q, want kept as written", got)
	}
	fi, err := os.Stat(filepath.Join(root, "usr/bin/tool"))
	if err != nil || fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("tool mode = %v, %v; want setuid 0755", fi.Mode(), err)
	}
	if _, err := os.Lstat(filepath.Join(root, "dev/null")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("device node was created (err %v); want skipped", err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "run/fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fifo = %v, %v", fi, err)
	}
	if fi, _ := os.Stat(filepath.Join(root, "ro")); fi.Mode().Perm() != 0o555 {
		t.Errorf("ro mode = %v, want 0555 applied after its contents", fi.Mode())
	}
}

func TestExtractMalicious(t *testing.T) {
	for _, tc := range []struct {
		name string
		ents []ent
	}{
		{"absolute", []ent{{typ: tar.TypeReg, name: "/etc/evil", body: "x"}}},
		{"dotdot", []ent{{typ: tar.TypeReg, name: "../outside/evil", body: "x"}}},
		{"inner dotdot", []ent{{typ: tar.TypeReg, name: "a/../../outside/evil", body: "x"}}},
		{"symlink then write through it", []ent{
			{typ: tar.TypeSymlink, name: "link", linkname: "../outside"},
			{typ: tar.TypeReg, name: "link/evil", body: "x"}}},
		{"absolute symlink then write", []ent{
			{typ: tar.TypeSymlink, name: "etc", linkname: "/tmp"},
			{typ: tar.TypeReg, name: "etc/evil", body: "x"}}},
		{"symlink then dir through it", []ent{
			{typ: tar.TypeSymlink, name: "link", linkname: "../outside"},
			{typ: tar.TypeDir, name: "link/sub/"}}},
		{"hardlink outside", []ent{{typ: tar.TypeLink, name: "h", linkname: "../outside/x"}}},
		{"hardlink through symlink", []ent{
			{typ: tar.TypeSymlink, name: "link", linkname: "../outside"},
			{typ: tar.TypeLink, name: "h", linkname: "link/x"}}},
		{"hardlink to absolute", []ent{{typ: tar.TypeLink, name: "h", linkname: "/etc/passwd"}}},
		{"dir over file", []ent{
			{typ: tar.TypeDir, name: "d/"},
			{typ: tar.TypeReg, name: "d", body: "x"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, outside := sandboxDirs(t)
			err := Extract(t.Context(), bytes.NewReader(mkTar(t, tc.ents...)), root, DefaultLimits)
			if err == nil {
				t.Fatal("Extract succeeded, want an error")
			}
			checkOutsideUntouched(t, outside)
		})
	}
}

// TestExtractSymlinkReplaced checks that a file entry at the path of an
// earlier symlink replaces the link instead of writing to its target.
func TestExtractSymlinkReplaced(t *testing.T) {
	root, outside := sandboxDirs(t)
	target := filepath.Join(outside, "victim")
	data := mkTar(t,
		ent{typ: tar.TypeSymlink, name: "f", linkname: "../outside/victim"},
		ent{typ: tar.TypeReg, name: "f", body: "payload"},
	)
	if err := Extract(t.Context(), bytes.NewReader(data), root, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("write went through the symlink to %s", target)
	}
	fi, err := os.Lstat(filepath.Join(root, "f"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("f = %v, %v; want a regular file", fi, err)
	}
	checkOutsideUntouched(t, outside)
}

func TestExtractLimits(t *testing.T) {
	root, _ := sandboxDirs(t)
	data := mkTar(t, ent{typ: tar.TypeReg, name: "a", body: strings.Repeat("x", 100)}, ent{typ: tar.TypeReg, name: "b", body: strings.Repeat("x", 100)})
	err := Extract(t.Context(), bytes.NewReader(data), root, Limits{MaxBytes: 150, MaxEntries: 10})
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("size limit: err = %v, want ErrResourceExhausted", err)
	}
	root, _ = sandboxDirs(t)
	err = Extract(t.Context(), bytes.NewReader(data), root, Limits{MaxBytes: 1000, MaxEntries: 1})
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("entry limit: err = %v, want ErrResourceExhausted", err)
	}
}

func TestBuildFromCompressedTar(t *testing.T) {
	data := mkTar(t, ent{typ: tar.TypeReg, name: "etc/motd", body: "hello\n"})
	dir := t.TempDir()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(data)
	zw.Close()
	archives := map[string][]byte{"plain.tar": data, "root.tar.gz": gz.Bytes()}
	if _, err := exec.LookPath("zstd"); err == nil {
		raw := filepath.Join(dir, "raw.tar")
		os.WriteFile(raw, data, 0o644)
		if out, err := exec.Command("zstd", "-q", "-o", filepath.Join(dir, "root.tar.zst"), raw).CombinedOutput(); err != nil {
			t.Fatalf("zstd: %v: %s", err, out)
		}
	} else {
		t.Log("zstd not installed: zstd archives not tested")
	}
	for name, b := range archives {
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "root.tar*"))
	names = append(names, filepath.Join(dir, "plain.tar"))
	for _, path := range names {
		t.Run(filepath.Base(path), func(t *testing.T) {
			src, err := ParseSource(path)
			if err != nil || src.Kind != KindTar {
				t.Fatalf("ParseSource(%q) = %+v, %v; want a tar source", path, src, err)
			}
			dest := filepath.Join(t.TempDir(), "tpl")
			var progress bytes.Buffer
			if err := Build(t.Context(), src, dest, &progress); err != nil {
				t.Fatalf("Build: %v", err)
			}
			if got := progress.String(); !strings.HasPrefix(got, "read the archive: ") || !strings.HasSuffix(got, " (100%)\n") {
				t.Errorf("progress = %q, want \"read the archive: N B of N B (100%%)\"", got)
			}
			if b, _ := os.ReadFile(filepath.Join(dest, "etc/motd")); string(b) != "hello\n" {
				t.Errorf("motd = %q", b)
			}
			checkFinished(t, dest)
		})
	}
}

func FuzzCleanRel(f *testing.F) {
	for _, s := range []string{"a/b", "./a//b/", "/etc/passwd", "../x", "a/../../b", "a/./b/..", "", ".", "a\x00b", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		rel, err := cleanRel(name)
		if err != nil {
			return
		}
		if strings.HasPrefix(rel, "/") || strings.Contains(rel, "\x00") {
			t.Fatalf("cleanRel(%q) = %q", name, rel)
		}
		for _, p := range strings.Split(rel, "/") {
			if rel != "" && (p == ".." || p == "." || p == "") {
				t.Fatalf("cleanRel(%q) = %q has component %q", name, rel, p)
			}
		}
		if rel != "" && filepath.Clean(rel) != rel {
			t.Fatalf("cleanRel(%q) = %q is not clean", name, rel)
		}
	})
}

// FuzzExtract feeds arbitrary bytes as a tar stream and checks that nothing
// is ever written outside the destination. Every input creates directories,
// so minimizing a new input is slow: run it with -fuzzminimizetime=2s.
func FuzzExtract(f *testing.F) {
	seeds := [][]ent{
		{{typ: tar.TypeReg, name: "a", body: "x"}},
		{{typ: tar.TypeSymlink, name: "l", linkname: "../outside"}, {typ: tar.TypeReg, name: "l/x", body: "x"}},
		{{typ: tar.TypeSymlink, name: "l", linkname: "../outside/v"}, {typ: tar.TypeReg, name: "l", body: "x"}},
		{{typ: tar.TypeSymlink, name: "d", linkname: ".."}, {typ: tar.TypeDir, name: "d/outside/x/"}},
		{{typ: tar.TypeLink, name: "h", linkname: "../outside/v"}},
		{{typ: tar.TypeDir, name: "a/b/"}, {typ: tar.TypeReg, name: "a/b/../../../outside/x", body: "x"}},
	}
	for _, s := range seeds {
		f.Add(mkTar(f, s...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		root, outside := sandboxDirs(t)
		_ = Extract(t.Context(), bytes.NewReader(data), root, Limits{MaxBytes: 1 << 20, MaxEntries: 100})
		checkOutsideUntouched(t, outside)
	})
}

// TestExtractIfArchive: tar archives are known by content, plain or
// compressed (gzip, bzip2, xz, zstd with the programs installed), and
// unpacked under Extract's rules and limits; other files, gzip of a
// non-tar included, are left alone.
func TestExtractIfArchive(t *testing.T) {
	dir := t.TempDir()
	plain := mkTar(t, ent{typ: tar.TypeReg, name: "a/f", body: "hi", mode: 0o644})
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(plain)
	zw.Close()
	var gzText bytes.Buffer
	zw = gzip.NewWriter(&gzText)
	zw.Write([]byte("just text\n"))
	zw.Close()
	files := map[string][]byte{"p.bin": plain, "g.bin": gz.Bytes(), "t.tar.gz": gzText.Bytes(), "e.tar": nil}
	for _, prog := range []string{"bzip2", "xz", "zstd"} {
		if _, err := exec.LookPath(prog); err != nil {
			continue
		}
		cmd := exec.Command(prog, "-c")
		cmd.Stdin = bytes.NewReader(plain)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		files[prog+".bin"] = out
	}
	for name, body := range files {
		os.WriteFile(filepath.Join(dir, name), body, 0o644)
		dest := filepath.Join(dir, "out-"+name)
		os.Mkdir(dest, 0o755)
		_, ok, err := ExtractIfArchive(t.Context(), filepath.Join(dir, name), dest, DefaultLimits)
		wantArchive := name != "t.tar.gz" && name != "e.tar"
		if err != nil || ok != wantArchive {
			t.Errorf("%s: archive %v, %v; want %v", name, ok, err, wantArchive)
			continue
		}
		if b, _ := os.ReadFile(filepath.Join(dest, "a", "f")); wantArchive && string(b) != "hi" {
			t.Errorf("%s: a/f = %q, want hi", name, b)
		}
	}
	os.WriteFile(filepath.Join(dir, "big.tar"), mkTar(t, ent{typ: tar.TypeReg, name: "f", body: "0123456789", mode: 0o644}), 0o644)
	os.Mkdir(filepath.Join(dir, "out-big"), 0o755)
	if _, _, err := ExtractIfArchive(t.Context(), filepath.Join(dir, "big.tar"), filepath.Join(dir, "out-big"), Limits{MaxBytes: 5, MaxEntries: 10}); err == nil {
		t.Error("an archive over MaxBytes was extracted")
	}
}

// TestExtractIfArchiveOwners: the owners of an archive's entries are
// returned by path, as the headers name them (a later entry of a path
// wins; the root and skipped device nodes are not listed), whoever runs
// the extraction.
func TestExtractIfArchiveOwners(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755, Uid: 9, Gid: 9},
		{Typeflag: tar.TypeDir, Name: "app/", Mode: 0o750, Uid: 1000, Gid: 1001},
		{Typeflag: tar.TypeReg, Name: "app/run", Mode: 0o4755, Uid: 1000, Gid: 50},
		{Typeflag: tar.TypeSymlink, Name: "app/link", Linkname: "run", Uid: 7, Gid: 8},
		{Typeflag: tar.TypeReg, Name: "app/twice", Mode: 0o644, Uid: 1, Gid: 1},
		{Typeflag: tar.TypeReg, Name: "app/twice", Mode: 0o644, Uid: 2, Gid: 3},
		{Typeflag: tar.TypeChar, Name: "app/null", Mode: 0o666, Uid: 4, Gid: 4, Devmajor: 1, Devminor: 3},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	dir := t.TempDir()
	file, dest := filepath.Join(dir, "a.tar"), filepath.Join(dir, "out")
	os.WriteFile(file, buf.Bytes(), 0o644)
	os.Mkdir(dest, 0o755)
	owners, ok, err := ExtractIfArchive(t.Context(), file, dest, DefaultLimits)
	if err != nil || !ok {
		t.Fatalf("ExtractIfArchive: %v, %v", ok, err)
	}
	want := map[string]Owner{"app": {1000, 1001}, "app/run": {1000, 50}, "app/link": {7, 8}, "app/twice": {2, 3}}
	if !maps.Equal(owners, want) {
		t.Errorf("owners %v, want %v", owners, want)
	}
	if fi, err := os.Stat(filepath.Join(dest, "app", "run")); err != nil || fi.Mode()&fs.ModeSetuid == 0 {
		t.Errorf("app/run: %v, %v; want its setuid bit kept", fi, err)
	}
}
