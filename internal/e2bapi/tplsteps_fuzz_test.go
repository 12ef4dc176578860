package e2bapi

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/template/dockerfile"
)

// FuzzTemplateSteps feeds arbitrary bytes as the body of a template build
// (POST /v2/templates/{id}/builds/{build}: the e2b SDK's steps JSON, a
// tenant's bytes): dockerfileOf turns it into Dockerfile steps or an
// ErrInvalidArgument, never a panic; every step it accepts keeps its type and
// E2B step number; every COPY source it accepts lies beneath that step's own
// upload directory (copyDir(i)), and what the build reads of it (the step's
// content key, as imagebuild.Prepare computes it) never depends on a file
// outside the context, through a symlink or otherwise.
func FuzzTemplateSteps(f *testing.F) {
	h := strings.Repeat("ab", 32)
	f.Add([]byte(`{"fromTemplate":"base","steps":[{"type":"RUN","args":["echo hi","user"]},{"type":"COPY","args":["f","/app/","user","0755"],"filesHash":"` + h + `"},{"type":"ENV","args":["A","1","B","2"]},{"type":"WORKDIR","args":["/app"]},{"type":"USER","args":["user"]}],"startCmd":"serve","readyCmd":"true"}`))
	f.Add([]byte(`{"fromTemplate":"base","steps":[{"type":"COPY","args":["esc/secret","/x"],"filesHash":"` + h + `"},{"type":"COPY","args":["up/secret","/y"],"filesHash":"` + h + `"}]}`))
	f.Add([]byte(`{"fromTemplate":"base","steps":[{"type":"COPY","args":["d/../../copy1/f","/x"],"filesHash":"` + h + `"},{"type":"COPY","args":["./d/./g","/z/","0:0","644"],"filesHash":"` + h + `"}]}`))
	f.Add([]byte(`{"fromImage":"oci:/layout#v1","steps":[{"type":"COPY","args":["d","/d"],"filesHash":"` + h + `"}],"force":true}`))
	f.Add([]byte(`{"fromTemplate":"b","steps":[{"type":"ENV","args":["A=B","x"]},{"type":"HEALTHCHECK","args":["x"]}]}`))
	ctxDir, secret := stepsContext(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		var spec templateSpec
		if json.Unmarshal(body, &spec) != nil {
			return
		}
		df, _, err := dockerfileOf(spec)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("refused with %v, not ErrInvalidArgument", err)
			}
			return
		}
		want := len(spec.Steps)
		if spec.StartCmd != "" {
			want++
		}
		// A local fromImage's FROM is named after the image's content
		// once the caller is known to be an admin (imageBase), not here.
		if (df.From == "" && spec.FromImage == "") || len(df.Steps) != want {
			t.Fatalf("from %q with %d steps, want %d", df.From, len(df.Steps), want)
		}
		for i, in := range df.Steps[:len(spec.Steps)] {
			if in.Line != i+1 || in.Cmd != spec.Steps[i].Type {
				t.Fatalf("step %d became %s at line %d", i+1, in.Cmd, in.Line)
			}
			if in.Cmd != "COPY" {
				continue
			}
			if len(in.Args) != 2 {
				t.Fatalf("COPY step %d has arguments %q, want source and destination", i+1, in.Args)
			}
			src, dir := in.Args[0], copyDir(i)
			if path.Clean(src) != src || (src != dir && !strings.HasPrefix(src, dir+"/")) {
				t.Fatalf("COPY step %d reads %q, outside its upload %s", i+1, src, dir)
			}
			if p, err := dockerfile.ResolveSource(ctxDir, src); err == nil && !within(ctxDir, p) {
				t.Fatalf("COPY step %d source %q resolves to %s, outside the context", i+1, src, p)
			}
			before, errBefore := dockerfile.ContentHash(ctxDir, in.Args[:1])
			if err := os.WriteFile(secret, []byte("changed"), 0o644); err != nil {
				t.Fatal(err)
			}
			after, errAfter := dockerfile.ContentHash(ctxDir, in.Args[:1])
			if err := os.WriteFile(secret, []byte("secret"), 0o644); err != nil {
				t.Fatal(err)
			}
			if before != after || (errBefore == nil) != (errAfter == nil) {
				t.Fatalf("COPY step %d (%q): its content key read a file outside the context (%q, %v → %q, %v)", i+1, src, before, errBefore, after, errAfter)
			}
		}
		_, _ = imagebuild.Prepare(imagebuild.Job{Name: "fuzz", File: df, ContextDir: ctxDir, Runtime: "ns", Ready: spec.ReadyCmd, Log: io.Discard})
	})
}

// stepsContext makes a build context as buildSteps does, copy0 … copy3 each
// an upload holding a file, a directory, and two symlinks out of the
// context (absolute and relative) to a directory beside it whose file
// secret it returns. Uploads holding such links are refused on arrival
// (checkArchive); the build must not rely on that.
func stepsContext(f *testing.F) (ctxDir, secret string) {
	parent := f.TempDir()
	ctxDir, outside := filepath.Join(parent, "ctx"), filepath.Join(parent, "outside")
	secret = filepath.Join(outside, "secret")
	must := func(err error) {
		if err != nil {
			f.Fatal(err)
		}
	}
	must(os.MkdirAll(outside, 0o755))
	must(os.WriteFile(secret, []byte("secret"), 0o644))
	for i := range 4 {
		up := filepath.Join(ctxDir, copyDir(i))
		must(os.MkdirAll(filepath.Join(up, "d"), 0o755))
		must(os.WriteFile(filepath.Join(up, "f"), []byte("f"), 0o644))
		must(os.WriteFile(filepath.Join(up, "d", "g"), []byte("g"), 0o644))
		must(os.Symlink(outside, filepath.Join(up, "esc")))
		must(os.Symlink("../../outside", filepath.Join(up, "up")))
		must(os.Symlink("../up", filepath.Join(up, "d", "up")))
	}
	return ctxDir, secret
}

// within reports whether p is dir or beneath it, after resolving dir's own
// links (ResolveSource answers beneath the resolved context).
func within(dir, p string) bool {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	rel, err := filepath.Rel(real, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
