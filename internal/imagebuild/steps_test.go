package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/driver/ns"
	"github.com/spacesandbox/space/internal/template/dockerfile"
)

func parseDF(t *testing.T, text string) *dockerfile.File {
	t.Helper()
	f, err := dockerfile.Parse(strings.NewReader(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestBuildStateRun: a RUN sees the ENV, WORKDIR (relative to the last) and
// USER before it, shell form through /bin/sh -c, root by default.
func TestBuildStateRun(t *testing.T) {
	f := parseDF(t, "FROM minimal\nRUN id\nENV A=1 B=2\nWORKDIR /srv\nWORKDIR app\nUSER app\nRUN [\"ls\", \"-l\"]\n")
	st := &buildState{env: map[string]string{}}
	var starts [][]string
	var users, cwds []string
	for _, in := range f.Steps {
		if st.apply(in) || in.Cmd != "RUN" {
			continue
		}
		s := st.runStart(in)
		starts, users, cwds = append(starts, s.Cmd), append(users, s.User), append(cwds, s.Cwd)
		if in.JSON && !reflect.DeepEqual(s.Env, map[string]string{"A": "1", "B": "2"}) {
			t.Errorf("env of the second RUN: %v", s.Env)
		}
	}
	want := [][]string{{"/bin/sh", "-c", "id"}, {"ls", "-l"}}
	if !reflect.DeepEqual(starts, want) || !reflect.DeepEqual(users, []string{"root", "app"}) || !reflect.DeepEqual(cwds, []string{"", "/srv/app"}) {
		t.Errorf("RUN execs %v users %v cwds %v; want %v, [root app], [\"\" /srv/app]", starts, users, cwds, want)
	}
}

// TestCopyPlan: Docker's destination rules, and a source outside the
// context refused.
func TestCopyPlan(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "d", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o640)
	os.WriteFile(filepath.Join(dir, "d", "sub", "b"), []byte("b"), 0o755)
	os.Symlink("sub/b", filepath.Join(dir, "d", "link"))
	st := &buildState{env: map[string]string{}, workdir: "/w"}
	plan := func(line string) []string {
		t.Helper()
		f := parseDF(t, "FROM minimal\n"+line+"\n")
		es, err := copyPlan(context.Background(), dir, t.TempDir(), st, f.Steps[0])
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.dest)
		}
		return out
	}
	for line, want := range map[string][]string{
		"COPY a.txt ./":     {"/w/a.txt"},
		"COPY a.txt /etc/b": {"/etc/b"},
		"COPY a.txt d /o/":  {"/o/a.txt", "/o", "/o/link", "/o/sub", "/o/sub/b"},
		"COPY d rel/":       {"/w/rel", "/w/rel/link", "/w/rel/sub", "/w/rel/sub/b"},
	} {
		if got := plan(line); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want %v", line, got, want)
		}
	}
	os.Symlink("/etc", filepath.Join(dir, "out"))
	// (A source with .. is refused by the parser already.)
	f := parseDF(t, "FROM minimal\nCOPY out/passwd /x\n")
	if _, err := copyPlan(context.Background(), dir, t.TempDir(), st, f.Steps[0]); !errors.Is(err, dockerfile.ErrOutsideContext) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("COPY through a symlink out of the context: %v, want ErrOutsideContext", err)
	}
}

// TestFixupScript: modes and owners of copied files, root by default, and
// names quoted for the shell.
func TestFixupScript(t *testing.T) {
	s := fixupScript([]copyEntry{{dest: "/a b'c", mode: 0o750}, {dest: "/l", link: "t"}}, "", "")
	for _, want := range []string{`chmod 750 '/a b'\''c'`, `chown '0:0' '/a b'\''c'`, `ln -s 't' '/l'`} {
		if !strings.Contains(s, want) {
			t.Errorf("script lacks %q:\n%s", want, s)
		}
	}
	if s := fixupScript([]copyEntry{{dest: "/f", mode: 0o644}}, "app:app", "600"); !strings.Contains(s, "chmod 600 '/f'") || !strings.Contains(s, "chown 'app:app' '/f'") {
		t.Errorf("--chown/--chmod not applied:\n%s", s)
	}
}

// writeTar writes a tar of hdrs (regular files get body "x") to file,
// gzip-compressed when gz.
func writeTar(t *testing.T, file string, gz bool, hdrs ...tar.Header) {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("x"))
		}
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAddArchive: ADD of a local tar archive (known by content, compressed
// or not) copies its tree into the destination; a file that only looks
// like one by name is copied as a file; a hostile archive (.., absolute
// names, a write through a symlink) is refused with the Dockerfile line.
func TestAddArchive(t *testing.T) {
	dir := t.TempDir()
	good := []tar.Header{
		{Name: "app/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "app/run.sh", Typeflag: tar.TypeReg, Mode: 0o755},
		{Name: "app/cur", Typeflag: tar.TypeSymlink, Linkname: "run.sh"},
	}
	writeTar(t, filepath.Join(dir, "app.tar.gz"), true, good...)
	writeTar(t, filepath.Join(dir, "plain.tar"), false, good...)
	os.WriteFile(filepath.Join(dir, "notes.tar.gz"), []byte("not an archive\n"), 0o644)
	st := &buildState{env: map[string]string{}, workdir: "/w"}
	plan := func(line string) ([]copyEntry, error) {
		t.Helper()
		return copyPlan(context.Background(), dir, t.TempDir(), st, parseDF(t, "FROM minimal\n"+line+"\n").Steps[0])
	}
	for line, want := range map[string][]string{
		"ADD app.tar.gz /opt/":            {"/opt/app", "/opt/app/cur", "/opt/app/run.sh"},
		"ADD plain.tar /opt":              {"/opt/app", "/opt/app/cur", "/opt/app/run.sh"},
		"COPY app.tar.gz /opt/":           {"/opt/app.tar.gz"},
		"ADD notes.tar.gz /n/":            {"/n/notes.tar.gz"},
		"ADD notes.tar.gz app.tar.gz /m/": {"/m/notes.tar.gz", "/m/app", "/m/app/cur", "/m/app/run.sh"},
	} {
		es, err := plan(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		var got []string
		for _, e := range es {
			got = append(got, e.dest)
			if e.dest == "/opt/app/cur" && e.link != "run.sh" {
				t.Errorf("%s: symlink %s -> %q, want run.sh", line, e.dest, e.link)
			}
			if e.dest == "/opt/app/run.sh" && e.mode.Perm() != 0o755 {
				t.Errorf("%s: run.sh mode %o, want 755", line, e.mode.Perm())
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want %v", line, got, want)
		}
	}
	for name, hdrs := range map[string][]tar.Header{
		"dotdot.tar":   {{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"abs.tar":      {{Name: "/etc/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"throught.tar": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "l/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		writeTar(t, filepath.Join(dir, name), false, hdrs...)
		if _, err := plan("ADD " + name + " /x/"); err == nil || !strings.Contains(err.Error(), "line 2: ADD "+name) {
			t.Errorf("hostile %s: %v; want refused with line 2", name, err)
		}
	}
	if _, err := os.Stat("/tmp/escape"); err == nil {
		t.Errorf("a hostile archive wrote /tmp/escape")
	}
}

// TestAddArchiveOwners: ADD of an archive keeps its entries' owners and
// modes (setuid included), a directory the archive has no entry of is
// root's, --chown overrides them all, and an id outside the sandbox's
// user namespace is refused with the line unless --chown overrides it.
func TestAddArchiveOwners(t *testing.T) {
	dir := t.TempDir()
	writeTar(t, filepath.Join(dir, "own.tar"), false,
		tar.Header{Name: "srv/app/", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 1000, Gid: 1001},
		tar.Header{Name: "srv/app/run", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 1000, Gid: 50},
		tar.Header{Name: "srv/app/cur", Typeflag: tar.TypeSymlink, Linkname: "run", Uid: 7, Gid: 8},
		tar.Header{Name: "srv/nobody", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 65534, Gid: 65534},
	)
	writeTar(t, filepath.Join(dir, "huge.tar"), false,
		tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Uid: MaxSandboxID + 1, Gid: 0})
	writeTar(t, filepath.Join(dir, "hugegid.tar"), false,
		tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 0, Gid: 1 << 31})
	st := &buildState{env: map[string]string{}}
	plan := func(line string) ([]copyEntry, error) {
		t.Helper()
		return copyPlan(context.Background(), dir, t.TempDir(), st, parseDF(t, "FROM minimal\n"+line+"\n").Steps[0])
	}
	es, err := plan("ADD own.tar /opt/")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range es {
		if e.owner == nil {
			t.Fatalf("%s: no owner from the archive", e.dest)
		}
		got[e.dest] = fmt.Sprintf("%d:%d %o", e.owner.UID, e.owner.GID, unixMode(e.mode))
	}
	want := map[string]string{
		"/opt/srv": "0:0 755", "/opt/srv/app": "1000:1001 750", "/opt/srv/app/run": "1000:50 4755",
		"/opt/srv/app/cur": "7:8 777", "/opt/srv/nobody": "65534:65534 644",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ADD own.tar: %v, want %v", got, want)
	}
	s := fixupScript(es, "", "")
	for _, want := range []string{"chown '1000:50' '/opt/srv/app/run'\nchmod 4755 '/opt/srv/app/run'\n", "chown -h '7:8' '/opt/srv/app/cur'", "chown '0:0' '/opt/srv'\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("fixup script lacks %q:\n%s", want, s)
		}
	}
	es, err = plan("ADD --chown=app:app own.tar /opt/")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.owner != nil {
			t.Errorf("ADD --chown: %s keeps the archive's owner %v", e.dest, *e.owner)
		}
	}
	if s := fixupScript(es, "app:app", ""); strings.Contains(s, "1000") || !strings.Contains(s, "chown 'app:app' '/opt/srv/app/run'") {
		t.Errorf("ADD --chown: script does not set app:app everywhere:\n%s", s)
	}
	for _, name := range []string{"huge.tar", "hugegid.tar"} {
		if _, err := plan("ADD " + name + " /x/"); err == nil || !strings.Contains(err.Error(), "line 2: ADD "+name) || !strings.Contains(err.Error(), "0 to 65535") {
			t.Errorf("ADD %s (an id past %d): %v; want refused with line 2", name, MaxSandboxID, err)
		}
		if _, err := plan("ADD --chown=0:0 " + name + " /x/"); err != nil {
			t.Errorf("ADD --chown=0:0 %s: %v; want the archive's owner overridden", name, err)
		}
	}
}

// TestMaxSandboxIDIsTheNamespaceRange: MaxSandboxID is the last id of the
// ns runtime's per-sandbox range.
func TestMaxSandboxIDIsTheNamespaceRange(t *testing.T) {
	if MaxSandboxID+1 != ns.RangeSize {
		t.Errorf("MaxSandboxID %d, ns.RangeSize %d: want the range's last id", MaxSandboxID, ns.RangeSize)
	}
}
