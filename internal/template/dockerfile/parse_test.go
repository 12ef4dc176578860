package dockerfile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func parse(t *testing.T, src string) *File {
	t.Helper()
	f, err := Parse(strings.NewReader(src), nil)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	return f
}

func TestParseFull(t *testing.T) {
	src := `# syntax=docker/dockerfile:1
# a comment
ARG BASE=base
FROM ${BASE}
ARG VER=1.2
ENV APP=/opt/app \
    GREETING="hello world" \
    # a comment inside a continuation
    EMPTY=
ENV LEGACY some value with spaces
WORKDIR $APP/src
COPY --chown=1000:1000 a.txt b/ ${APP}/
ADD ["c d.txt", "/etc/c"]
RUN echo "$APP" && \
    make -j2
RUN ["/bin/sh", "-c", "echo json"]
USER ${U:-builder}
LABEL version=${VER} "desc"='single $NOSUB'
EXPOSE 8080 53/udp
ENTRYPOINT ["/app"]
CMD serve --port=8080
`
	f := parse(t, src)
	if f.From != "base" {
		t.Errorf("From = %q, want base", f.From)
	}
	if len(f.Notes) != 1 || !strings.Contains(f.Notes[0], "syntax") {
		t.Errorf("Notes = %q, want the syntax directive noted", f.Notes)
	}
	want := []struct {
		line int
		cmd  string
		args []string
	}{
		{5, "ARG", []string{"VER", "1.2"}},
		{6, "ENV", []string{"APP", "/opt/app", "GREETING", "hello world", "EMPTY", ""}},
		{10, "ENV", []string{"LEGACY", "some value with spaces"}},
		{11, "WORKDIR", []string{"/opt/app/src"}},
		{12, "COPY", []string{"a.txt", "b/", "/opt/app/"}},
		{13, "ADD", []string{"c d.txt", "/etc/c"}},
		{14, "RUN", []string{`echo "$APP" && make -j2`}},
		{16, "RUN", []string{"/bin/sh", "-c", "echo json"}},
		{17, "USER", []string{"builder"}},
		{18, "LABEL", []string{"version", "1.2", "desc", "single $NOSUB"}},
		{19, "EXPOSE", []string{"8080", "53/udp"}},
		{20, "ENTRYPOINT", []string{"/app"}},
		{21, "CMD", []string{"serve --port=8080"}},
	}
	if len(f.Steps) != len(want) {
		t.Fatalf("got %d steps, want %d: %+v", len(f.Steps), len(want), f.Steps)
	}
	for i, w := range want {
		s := f.Steps[i]
		if s.Line != w.line || s.Cmd != w.cmd || !reflect.DeepEqual(s.Args, w.args) {
			t.Errorf("step %d = line %d %s %q, want line %d %s %q", i, s.Line, s.Cmd, s.Args, w.line, w.cmd, w.args)
		}
	}
	if got := f.Steps[4].Flags["chown"]; got != "1000:1000" {
		t.Errorf("COPY --chown = %q", got)
	}
	if !f.Steps[7].JSON || f.Steps[6].JSON {
		t.Errorf("JSON form flags wrong: %v %v", f.Steps[6].JSON, f.Steps[7].JSON)
	}
}

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"X": "x", "E": ""}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for in, want := range map[string]string{
		"$X":           "x",
		"${X}y":        "xy",
		"$Xy":          "",
		"${U:-d}":      "d",
		"${E:-d}":      "d",
		"${X:-d}":      "x",
		"${X:+a}":      "a",
		"${U:+a}":      "",
		`\$X`:          "$X",
		"a$":           "a$",
		"$1":           "$1",
		"pre-${X}-suf": "pre-x-suf",
	} {
		got, err := substitute(in, lookup)
		if err != nil || got != want {
			t.Errorf("substitute(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"${X", "${X:?e}", "${X#p}", "${}"} {
		if _, err := substitute(bad, lookup); err == nil {
			t.Errorf("substitute(%q): want an error", bad)
		}
	}
}

func TestBuildArgOverridesDefault(t *testing.T) {
	f, err := Parse(strings.NewReader("FROM base\nARG V=1\nENV W=$V\n"), map[string]string{"V": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Steps[1].Args; !reflect.DeepEqual(got, []string{"W", "2"}) {
		t.Errorf("ENV = %q, want W=2", got)
	}
}

func TestArgBeforeFromOnlyInFrom(t *testing.T) {
	f := parse(t, "ARG B=base\nFROM $B\nENV X=${B:-unset}\n")
	if got := f.Steps[0].Args[1]; got != "unset" {
		t.Errorf("ARG before FROM leaked past FROM: ENV X=%q", got)
	}
}

func TestRefused(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"FROM base AS build\n", "line 1: FROM is not supported with AS"},
		{"FROM base\nFROM other\n", "line 2: FROM is not supported a second time"},
		{"FROM --platform=linux/arm64 base\n", "line 1: FROM is not supported with flags"},
		{"FROM base\nCOPY --from=build /a /b\n", "line 2: COPY --from is not supported"},
		{"FROM base\n\n# c\nONBUILD RUN x\n", "line 4: ONBUILD is not supported"},
		{"FROM base\nHEALTHCHECK CMD true\n", "line 2: HEALTHCHECK is not supported"},
		{"FROM base\nVOLUME /data\n", "line 2: VOLUME is not supported"},
		{"FROM base\nSHELL [\"/bin/bash\"]\n", "line 2: SHELL is not supported"},
		{"FROM base\nSTOPSIGNAL SIGTERM\n", "line 2: STOPSIGNAL is not supported"},
		{"FROM base\nFROBNICATE x\n", "line 2: FROBNICATE is not supported"},
		{"FROM base\nRUN <<EOF\necho hi\nEOF\n", "line 2: RUN is not supported with a heredoc"},
		{"FROM base\nCOPY <<-'EOF' /x\n", "line 2: COPY is not supported with a heredoc"},
		{"FROM base\nRUN --mount=type=cache,target=/c true\n", "line 2: RUN is not supported with flags"},
		{"FROM base\nADD https://example.com/x /x\n", "line 2: ADD is not supported from a URL"},
		{"FROM base\nCOPY ../secret /x\n", "line 2: COPY: source \"../secret\": climbs out"},
		{"FROM base\nCOPY a/../../b /x\n", "climbs out"},
		{"FROM base\nCOPY *.go /x/\n", "wildcards"},
		{"FROM base\nCOPY a b /x\n", "must be a directory ending in /"},
		{"FROM base\nCOPY --link a /x\n", "COPY --link is not supported"},
		{"RUN true\n", "line 1: RUN before FROM"},
		{"# just a comment\n", "no FROM"},
		{"# escape=`\nFROM base\n", "line 1: parser directive escape=` is not supported"},
		{"FROM base\nEXPOSE 8000-8010\n", "not a port"},
		{"FROM base\nENV 1X=y\n", "not a valid variable name"},
		{"FROM base\nENV X=\"open\n", "unterminated"},
		{"FROM base\nUSER a b\n", "USER takes one"},
		{"FROM base\nRUN\n", "line 2: RUN needs arguments"},
	} {
		_, err := Parse(strings.NewReader(c.src), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.src, err, c.want)
		}
		var pe *Error
		if err != nil && !strings.Contains(c.want, "no FROM") && !errors.As(err, &pe) {
			t.Errorf("Parse(%q): error %v is not an *Error", c.src, err)
		}
	}
}

func TestTextIgnoresLayout(t *testing.T) {
	a := parse(t, "FROM base\nENV A=1\nRUN echo hi\n")
	b := parse(t, "FROM base\n# comment\nENV \\\n  A=1\n\nRUN echo hi\n")
	for i := range a.Steps {
		if a.Steps[i].Text != b.Steps[i].Text {
			t.Errorf("step %d: Text %q != %q", i, a.Steps[i].Text, b.Steps[i].Text)
		}
	}
	c := parse(t, "FROM base\nENV A=2\nRUN echo hi\n")
	if a.Steps[0].Text == c.Steps[0].Text {
		t.Errorf("ENV A=1 and ENV A=2 share Text %q", a.Steps[0].Text)
	}
}

func TestResolveSource(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	ctx := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(ctx, "d/sub"), 0o755))
	must(os.WriteFile(filepath.Join(ctx, "d/sub/f"), []byte("f"), 0o644))
	must(os.Symlink("sub/f", filepath.Join(ctx, "d/in")))                     // stays inside
	must(os.Symlink("../../..", filepath.Join(ctx, "d/sub/up")))              // climbs out
	must(os.Symlink(outside, filepath.Join(ctx, "abs")))                      // absolute, outside
	must(os.Symlink(filepath.Join(ctx, "d"), filepath.Join(ctx, "absin")))    // absolute, inside
	must(os.Symlink("../"+filepath.Base(outside), filepath.Join(ctx, "rel"))) // relative, outside
	must(os.Symlink("loop", filepath.Join(ctx, "loop")))

	realCtx, _ := filepath.EvalSymlinks(ctx)
	for src, want := range map[string]string{
		"d/sub/f":   "d/sub/f",
		"/d/sub/f":  "d/sub/f",
		"d/in":      "d/sub/f",
		"absin/in":  "d/sub/f",
		"d/./sub/f": "d/sub/f",
		".":         "",
	} {
		got, err := ResolveSource(ctx, src)
		if err != nil || got != filepath.Join(realCtx, want) {
			t.Errorf("ResolveSource(%q) = %q, %v; want %q", src, got, err, filepath.Join(realCtx, want))
		}
	}
	for _, src := range []string{"../x", "d/sub/up/secret", "d/sub/up", "abs/secret", "rel/secret", "d/../../x"} {
		if got, err := ResolveSource(ctx, src); !errors.Is(err, ErrOutsideContext) {
			t.Errorf("ResolveSource(%q) = %q, %v; want ErrOutsideContext", src, got, err)
		}
	}
	if _, err := ResolveSource(ctx, "loop"); err == nil || !strings.Contains(err.Error(), "too many symlinks") {
		t.Errorf("ResolveSource(loop) = %v, want too many symlinks", err)
	}
	if _, err := ResolveSource(ctx, "missing"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("ResolveSource(missing) = %v, want does not exist", err)
	}
}

// TestFromImageForms: FROM oci:DIR[#REF] and docker-archive:FILE[#TAG] are
// kept whole (the # is no comment), also through an ARG before FROM; AS
// (multi-stage) is refused.
func TestFromImageForms(t *testing.T) {
	for src, want := range map[string]string{
		"FROM oci:layout#app:1\nRUN true\n":                             "oci:layout#app:1",
		"FROM docker-archive:/srv/img.tar\n":                            "docker-archive:/srv/img.tar",
		"ARG IMG=img.tar\nFROM docker-archive:${IMG}#a/b:1\nRUN true\n": "docker-archive:img.tar#a/b:1",
	} {
		f, err := Parse(strings.NewReader(src), nil)
		if err != nil {
			t.Errorf("%q: %v", src, err)
		} else if f.From != want {
			t.Errorf("%q: FROM %q; want %q", src, f.From, want)
		}
	}
	if _, err := Parse(strings.NewReader("FROM oci:layout AS build\nRUN true\n"), nil); err == nil || !strings.Contains(err.Error(), "multi-stage") {
		t.Errorf("FROM oci:layout AS build: %v; want multi-stage refused", err)
	}
}
