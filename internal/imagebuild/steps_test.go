package imagebuild

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

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
		es, err := copyPlan(dir, st, f.Steps[0])
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
	if _, err := copyPlan(dir, st, f.Steps[0]); !errors.Is(err, dockerfile.ErrOutsideContext) || !strings.Contains(err.Error(), "line 2") {
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
