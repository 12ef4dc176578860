package e2bapi

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/service"
)

// tarOf is a tar of hdrs, each regular file with content "x"; gzipped
// when gz.
func tarOf(t *testing.T, gz bool, hdrs ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	var zw *gzip.Writer
	w := tar.NewWriter(&buf)
	if gz {
		zw = gzip.NewWriter(&buf)
		w = tar.NewWriter(zw)
	}
	for _, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := w.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			w.Write([]byte("x"))
		}
	}
	w.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

// TestCheckArchiveHostile: an upload whose entry is absolute or climbs
// out, a symlink or hard link out of the file context, or a device is
// refused as invalid, gzip or not; the SDK's own tars (files,
// directories, links inside) pass.
func TestCheckArchiveHostile(t *testing.T) {
	ok := []tar.Header{
		{Name: "app/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "app/a.txt", Typeflag: tar.TypeReg},
		{Name: "app/sub/link", Typeflag: tar.TypeSymlink, Linkname: "../a.txt"},
		{Name: "app/hard", Typeflag: tar.TypeLink, Linkname: "app/a.txt"},
	}
	for _, gz := range []bool{false, true} {
		if err := checkArchive(context.Background(), bytes.NewReader(tarOf(t, gz, ok...))); err != nil {
			t.Errorf("gzip %v: the SDK's tar refused: %v", gz, err)
		}
	}
	hostile := []struct {
		name string
		hdr  tar.Header
	}{
		{"dotdot", tar.Header{Name: "../evil", Typeflag: tar.TypeReg}},
		{"inner dotdot", tar.Header{Name: "app/../../evil", Typeflag: tar.TypeReg}},
		{"absolute", tar.Header{Name: "/etc/evil", Typeflag: tar.TypeReg}},
		{"symlink absolute", tar.Header{Name: "app/l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}},
		{"symlink climbing", tar.Header{Name: "app/l", Typeflag: tar.TypeSymlink, Linkname: "../../etc/passwd"}},
		{"hard link out", tar.Header{Name: "app/h", Typeflag: tar.TypeLink, Linkname: "../etc/passwd"}},
		{"device", tar.Header{Name: "app/dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}},
	}
	for _, c := range hostile {
		for _, gz := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s gzip %v", c.name, gz), func(t *testing.T) {
				err := checkArchive(context.Background(), bytes.NewReader(tarOf(t, gz, append(ok[:2:2], c.hdr)...)))
				if !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Errorf("checkArchive = %v, want an invalid-argument refusal", err)
				}
			})
		}
	}
	if err := checkArchive(context.Background(), strings.NewReader("not a tar at all, just some bytes that go on")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("garbage: %v, want invalid argument", err)
	}
}

// TestStoreUploadRefusesHostile: a hostile upload is not kept; a good
// one is kept under its tenant's directory and extracts there; another
// tenant's hash finds nothing.
func TestStoreUploadRefusesHostile(t *testing.T) {
	a := &API{filesDir: t.TempDir(), key: []byte("k"), uploads: newUploadKeeper(uploadBounds{})}
	hash := strings.Repeat("ab", 32)
	bad := tarOf(t, true, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"})
	if err := a.storeUpload(context.Background(), "t1", hash, bytes.NewReader(bad)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("hostile upload: %v, want refused", err)
	}
	if _, err := os.Stat(a.filesPath("t1", hash)); !os.IsNotExist(err) {
		t.Fatalf("hostile upload kept: %v", err)
	}
	good := tarOf(t, true, tar.Header{Name: "app/a.txt", Typeflag: tar.TypeReg})
	if err := a.storeUpload(context.Background(), "t1", hash, bytes.NewReader(good)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := a.extractUpload(context.Background(), "t1", hash, filepath.Join(dir, "c")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "c", "app", "a.txt")); err != nil || string(b) != "x" {
		t.Errorf("extracted file: %q %v", b, err)
	}
	if err := a.extractUpload(context.Background(), "t2", hash, filepath.Join(dir, "d")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("another tenant's extract of the hash: %v, want not uploaded", err)
	}
}

// TestUploadSig: an upload url's MAC binds the tenant, the hash and the
// expiry.
func TestUploadSig(t *testing.T) {
	a := &API{key: []byte("k")}
	h := strings.Repeat("0", 64)
	sig := a.uploadSig("t1", h, 100)
	for _, other := range []string{a.uploadSig("t2", h, 100), a.uploadSig("t1", strings.Repeat("1", 64), 100), a.uploadSig("t1", h, 101)} {
		if other == sig {
			t.Errorf("two uploads share the MAC %s", sig)
		}
	}
}

// TestDockerfileOf: the SDK's steps become the builder's; what SPACE
// cannot build is refused naming the feature.
func TestDockerfileOf(t *testing.T) {
	h := strings.Repeat("a", 64)
	df, force, err := dockerfileOf(templateSpec{
		FromTemplate: "base",
		Steps: []templateStep{
			{Type: "RUN", Args: []string{"echo hi", "app"}},
			{Type: "COPY", Args: []string{"src/x", "/app/", "app", "0755"}, FilesHash: h},
			{Type: "ENV", Args: []string{"A", "1"}},
			{Type: "WORKDIR", Args: []string{"/app"}},
			{Type: "USER", Args: []string{"app"}, Force: true},
		},
		StartCmd: "serve",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !force {
		t.Error("a step's force did not make the build skip the cache")
	}
	if len(df.Steps) != 6 || df.From != "base" {
		t.Fatalf("steps %+v from %q", df.Steps, df.From)
	}
	if s := df.Steps[0]; s.Flags["user"] != "app" || s.Args[0] != "echo hi" || s.Line != 1 {
		t.Errorf("RUN: %+v", s)
	}
	if s := df.Steps[1]; s.Args[0] != "copy1/src/x" || s.Flags["chown"] != "app" || s.Flags["chmod"] != "0755" || !strings.Contains(s.Text, h) {
		t.Errorf("COPY: %+v", s)
	}
	if s := df.Steps[5]; s.Cmd != "CMD" || strings.Join(s.Args, " ") != "/bin/sh -c serve" {
		t.Errorf("start command: %+v", s)
	}
	refused := []struct {
		spec templateSpec
		want string
	}{
		{templateSpec{FromImage: "ubuntu:22.04"}, "fromImage"},
		{templateSpec{FromImageRegistry: []byte(`{"type":"aws"}`)}, "fromImageRegistry"},
		{templateSpec{FromImage: "oci:layout"}, "ABSOLUTE"},
		{templateSpec{FromImage: "docker-archive:/a\x00b"}, "ABSOLUTE"},
		{templateSpec{FromImage: "oci:/l", FromTemplate: "b"}, "name one base"},
		{templateSpec{}, "fromTemplate"},
		{templateSpec{FromTemplate: "team/base"}, "not a SPACE template name"},
		{templateSpec{FromTemplate: "b", Steps: []templateStep{{Type: "COPY", Args: []string{"../x", "/"}, FilesHash: h}}}, "leaves the file context"},
		{templateSpec{FromTemplate: "b", Steps: []templateStep{{Type: "COPY", Args: []string{"*.txt", "/"}, FilesHash: h}}}, "glob"},
		{templateSpec{FromTemplate: "b", Steps: []templateStep{{Type: "COPY", Args: []string{"x", "/"}, FilesHash: "nothex"}}}, "filesHash"},
		{templateSpec{FromTemplate: "b", Steps: []templateStep{{Type: "HEALTHCHECK", Args: []string{"x"}}}}, "unknown step type"},
		{templateSpec{FromTemplate: "b", Steps: []templateStep{{Type: "ENV", Args: []string{"A"}}}}, "step 1 (ENV)"},
	}
	for _, c := range refused {
		_, _, err := dockerfileOf(c.spec)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want invalid argument naming %q", c.spec, err, c.want)
		}
	}
}

// TestBuildLogCapped: a build's log stops at maxBuildLogs entries, the
// last saying so, and a long line is clipped to maxLogMessage.
func TestBuildLogCapped(t *testing.T) {
	b := newTemplateBuilds()
	tb, err := b.add(context.Background(), newBuild{tenant: "t1", alias: "x"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	w := &logWriter{b: b, tb: tb}
	fmt.Fprintf(w, "%s\n", strings.Repeat("y", 3*maxLogMessage))
	for i := 0; i < maxBuildLogs+10; i++ {
		fmt.Fprintf(w, "line %d\n", i)
	}
	if n := len(tb.logs); n != maxBuildLogs {
		t.Fatalf("%d log entries, want the cap %d", n, maxBuildLogs)
	}
	if m := tb.logs[0].Message; len(m) > maxLogMessage+len("…") {
		t.Errorf("long line kept at %d bytes, want at most %d", len(m), maxLogMessage)
	}
	if last := tb.logs[maxBuildLogs-1].Message; !strings.Contains(last, "capped") {
		t.Errorf("last entry %q does not say the log is capped", last)
	}
}

// TestBuildsBounded: a tenant runs at most maxTenantBuilds builds at once,
// another tenant's build is not found, and StopBuilds refuses new ones.
func TestBuildsBounded(t *testing.T) {
	a := &API{builds: newTemplateBuilds()}
	now := time.Now()
	var first *templateBuild
	for i := 0; i < maxTenantBuilds; i++ {
		tb, err := a.builds.add(context.Background(), newBuild{tenant: "t1", alias: fmt.Sprint("x", i)}, now)
		if err != nil {
			t.Fatal(err)
		}
		first = tb
	}
	if _, err := a.builds.add(context.Background(), newBuild{tenant: "t1", alias: "y"}, now); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("build past the tenant's cap: %v, want resource exhausted", err)
	}
	if _, err := a.builds.get(context.Background(), "t2", first.templateID, first.id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's get: %v, want not found", err)
	}
	a.builds.finish(context.Background(), first, nil)
	if _, err := a.builds.add(context.Background(), newBuild{tenant: "t1", alias: "y"}, now); err != nil {
		t.Errorf("after one finished: %v", err)
	}
	a.StopBuilds()
	if _, err := a.builds.add(context.Background(), newBuild{tenant: "t3", alias: "z"}, now); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("after StopBuilds: %v, want unavailable", err)
	}
}

// callerHost is a Host whose every caller is c; nothing else of it is
// used.
type callerHost struct {
	Host
	c service.Caller
}

func (h callerHost) Caller(context.Context) service.Caller { return h.c }

// TestUploadURLBase: the upload link is built on the configured public URL
// whatever the request's Host header says, and on the Host header (and the
// request's scheme) only without one.
func TestUploadURLBase(t *testing.T) {
	hash := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name, public, host, proto, want string
	}{
		{"public url", "https://space.example.com", "evil.example", "", "https://space.example.com/e2b/template-files/"},
		{"public url with port", "http://10.0.0.5:8080", "evil.example", "https", "http://10.0.0.5:8080/e2b/template-files/"},
		{"no public url", "", "api.local:9000", "", "http://api.local:9000/e2b/template-files/"},
		{"no public url, https proxy", "", "api.local", "https", "https://api.local/e2b/template-files/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(Config{Host: callerHost{c: service.Caller{Tenant: "t1", Admin: true}}, TokenKey: []byte("k"),
				FilesDir: t.TempDir(), PublicURL: tc.public})
			tb, err := a.builds.add(context.Background(), newBuild{tenant: "t1", alias: "tpl"}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/e2b/templates/tpl/files/"+hash, nil)
			r.Host = tc.host
			if tc.proto != "" {
				r.Header.Set("X-Forwarded-Proto", tc.proto)
			}
			r.SetPathValue("templateID", tb.templateID)
			r.SetPathValue("hash", hash)
			w := httptest.NewRecorder()
			a.handleTemplateFiles(w, r)
			var body struct {
				URL string `json:"url"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != 200 {
				t.Fatalf("GET files: %d %s (%v)", w.Code, w.Body, err)
			}
			if !strings.HasPrefix(body.URL, tc.want) {
				t.Errorf("upload url %q, want it on %q", body.URL, tc.want)
			}
		})
	}
}

// TestParsePublicURL: only http(s)://HOST[:PORT] is a public URL.
func TestParsePublicURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://space.example.com": "https://space.example.com",
		"http://10.0.0.5:8080/":     "http://10.0.0.5:8080",
		"https://[::1]:8443":        "https://[::1]:8443",
	} {
		if got, err := ParsePublicURL(in); err != nil || got != want {
			t.Errorf("ParsePublicURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"space.example.com", "ftp://x", "https://", "https://x/e2b", "https://x?a=1", "https://u:p@x", "https://x#f", "http://x:port"} {
		if got, err := ParsePublicURL(in); err == nil {
			t.Errorf("ParsePublicURL(%q) = %q, want an error", in, got)
		}
	}
}

// TestDockerfileOfLocalImage: fromImage of an image on the server's
// filesystem is accepted without reading it (the caller may not be an
// admin yet); the base is named when the build starts (imageBase).
func TestDockerfileOfLocalImage(t *testing.T) {
	for _, src := range []string{"oci:/srv/layout#app:1", "docker-archive:/srv/image.tar"} {
		df, _, err := dockerfileOf(templateSpec{FromImage: src, Steps: []templateStep{{Type: "RUN", Args: []string{"true"}}}})
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if df.From != "" || len(df.Steps) != 1 {
			t.Errorf("%s: FROM %q, %d steps; want no FROM until the image is read, and the step", src, df.From, len(df.Steps))
		}
	}
}

// TestImageBaseByContent: a fromImage's import is named after the image's
// content and ref, not its path: a copy under another path shares the
// import, the same path with new content gets a new one, as does another
// ref; a path that holds no image is an invalid argument.
func TestImageBaseByContent(t *testing.T) {
	dir := t.TempDir()
	index := `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` + strings.Repeat("a", 64) + `","size":1}]}`
	for _, d := range []string{"one", "two"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
		os.WriteFile(filepath.Join(dir, d, "index.json"), []byte(index), 0o644)
	}
	name := func(from string) string {
		t.Helper()
		src, n, err := imageBase(from)
		if err != nil {
			t.Fatalf("imageBase(%s): %v", from, err)
		}
		if !strings.HasPrefix(n, ImagePrefix) || !strings.HasPrefix(src, "oci:/") {
			t.Errorf("imageBase(%s) = %s, %s; want an oci:/ source and %s…", from, src, n, ImagePrefix)
		}
		return n
	}
	one := name("oci:" + filepath.Join(dir, "one") + "#app:1")
	if two := name("oci:" + filepath.Join(dir, "two") + "#app:1"); two != one {
		t.Errorf("one image under two paths: imports %s and %s, want one", one, two)
	}
	if other := name("oci:" + filepath.Join(dir, "one") + "#app:2"); other == one {
		t.Errorf("another ref of the layout shares import %s", one)
	}
	os.WriteFile(filepath.Join(dir, "one", "index.json"), []byte(strings.Replace(index, "aaaa", "bbbb", 1)), 0o644)
	if changed := name("oci:" + filepath.Join(dir, "one") + "#app:1"); changed == one {
		t.Errorf("the layout changed under its path: still import %s, want a new one", one)
	}
	if _, _, err := imageBase("docker-archive:" + filepath.Join(dir, "none.tar")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a missing archive: %v, want InvalidArgument", err)
	}
}

// deniedHost is a callerHost answering errors with their errdefs status.
type deniedHost struct{ callerHost }

func (h deniedHost) BuildBackend(*http.Request) (imagebuild.Backend, error) {
	return nil, fmt.Errorf("%w: the test has no build backend: the request got past the admin check", errdefs.ErrInvalidArgument)
}

func (h deniedHost) Status(err error) int {
	if errors.Is(err, errdefs.ErrPermissionDenied) {
		return 403
	}
	return 400
}

// TestLocalImageAdminOnly: a key that is not an admin's may not name a
// path on the server's machine as fromImage.
func TestLocalImageAdminOnly(t *testing.T) {
	a := New(Config{Host: deniedHost{callerHost{c: service.Caller{Tenant: "t1"}}}, TokenKey: []byte("k"), FilesDir: t.TempDir()})
	tb, err := a.builds.add(context.Background(), newBuild{tenant: "t1", alias: "tpl"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/e2b/v2/templates/tpl/builds/"+tb.id, strings.NewReader(`{"fromImage":"oci:/etc","steps":[]}`))
	r.Header.Set("Content-Type", "application/json")
	r.SetPathValue("templateID", tb.templateID)
	r.SetPathValue("buildID", tb.id)
	w := httptest.NewRecorder()
	a.handleTemplateBuild(w, r)
	if w.Code != 403 || !strings.Contains(w.Body.String(), "admin key only") {
		t.Fatalf("fromImage oci:/etc with a tenant key: %d %s, want 403 saying admin key only", w.Code, w.Body)
	}
}
