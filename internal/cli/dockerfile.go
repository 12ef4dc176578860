package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"

	"github.com/spacesandbox/space/internal/template/dockerfile"
	"github.com/spacesandbox/space/internal/template/imagecfg"
)

// A Dockerfile build runs through the public API: a build sandbox from the
// FROM template, each RUN an exec in it (with the ENV, WORKDIR and USER so
// far), each COPY/ADD the context's files written through the files API,
// then the image defaults at /etc/space/image-config.json, a disk snapshot,
// and template NAME built from that snapshot (source snapshot:ID), which is
// then removed. dfcache.go has the step cache.

// buildState is what the steps so far set for the next RUN.
type buildState struct {
	env     map[string]string
	args    map[string]string // ARG values: in RUN's environment, not the image's
	workdir string
	user    string
}

// apply records an ENV, WORKDIR or USER step; it reports whether it was one.
func (s *buildState) apply(in dockerfile.Instruction) bool {
	switch in.Cmd {
	case "ENV":
		for i := 0; i+1 < len(in.Args); i += 2 {
			s.env[in.Args[i]] = in.Args[i+1]
		}
	case "ARG":
		if s.args == nil {
			s.args = map[string]string{}
		}
		for i := 0; i+1 < len(in.Args); i += 2 {
			s.args[in.Args[i]] = in.Args[i+1]
		}
	case "WORKDIR":
		s.workdir = s.abs(in.Args[0])
	case "USER":
		s.user = in.Args[0]
	default:
		return false
	}
	return true
}

// abs is p relative to the WORKDIR, as Docker reads WORKDIR and COPY
// destinations.
func (s *buildState) abs(p string) string {
	if strings.HasPrefix(p, "/") {
		return path.Clean(p)
	}
	return path.Join("/", s.workdir, p)
}

// runStart is the exec of a RUN step: shell form through /bin/sh -c.
func (s *buildState) runStart(in dockerfile.Instruction) sandboxv1.ExecStart {
	cmd := in.Args
	if !in.JSON {
		cmd = []string{"/bin/sh", "-c", in.Args[0]}
	}
	// As in Docker, an ARG is in RUN's environment and an ENV of the same
	// name wins.
	env := make(map[string]string, len(s.args)+len(s.env))
	for k, v := range s.args {
		env[k] = v
	}
	for k, v := range s.env {
		env[k] = v
	}
	user := s.user
	if user == "" {
		user = "root" // Docker's default
	}
	return sandboxv1.ExecStart{Cmd: cmd, Env: env, Cwd: s.workdir, User: user}
}

// copyEntry is one file, directory or symlink a COPY puts in the sandbox.
type copyEntry struct {
	host, dest string
	mode       fs.FileMode
	link       string // symlink target
}

// copyPlan lists what COPY/ADD in copies from contextDir, with Docker's
// destination rules: a directory source copies its contents; several
// sources or a destination ending in / make the destination a directory.
// Sources are confined to the context (dockerfile.ResolveSource).
func copyPlan(contextDir string, s *buildState, in dockerfile.Instruction) ([]copyEntry, error) {
	srcs, rawDest := in.Args[:len(in.Args)-1], in.Args[len(in.Args)-1]
	dest := s.abs(rawDest)
	intoDir := strings.HasSuffix(rawDest, "/") || len(srcs) > 1
	var out []copyEntry
	for _, src := range srcs {
		p, err := dockerfile.ResolveSource(contextDir, src)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s %s: %w", in.Line, in.Cmd, src, err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s %s: %w", in.Line, in.Cmd, src, err)
		}
		base := dest
		if !fi.IsDir() {
			if intoDir {
				base = path.Join(dest, filepath.Base(p))
			}
			out = append(out, copyEntry{host: p, dest: base, mode: fi.Mode()})
			continue
		}
		err = filepath.WalkDir(p, func(hp string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(p, hp)
			info, err := d.Info()
			if err != nil {
				return err
			}
			e := copyEntry{host: hp, dest: path.Join(base, filepath.ToSlash(rel)), mode: info.Mode()}
			switch {
			case info.Mode()&fs.ModeSymlink != 0:
				if e.link, err = os.Readlink(hp); err != nil {
					return err
				}
			case info.IsDir(), info.Mode().IsRegular():
			default:
				return fmt.Errorf("%s: not a file, directory or symlink: COPY copies only those", hp)
			}
			out = append(out, e)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("line %d: %s %s: %w", in.Line, in.Cmd, src, err)
		}
	}
	return out, nil
}

// fixupScript sets what the files API does not: modes, owners (--chown, or
// root as Docker does) and symlinks.
func fixupScript(entries []copyEntry, chown, chmod string) string {
	owner := "0:0"
	if chown != "" {
		owner = chown
	}
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, e := range entries {
		q := shQuote(e.dest)
		if e.link != "" {
			fmt.Fprintf(&b, "rm -rf %s; ln -s %s %s\n", q, shQuote(e.link), q)
			fmt.Fprintf(&b, "chown -h %s %s\n", shQuote(owner), q)
			continue
		}
		mode := fmt.Sprintf("%o", e.mode.Perm())
		if chmod != "" {
			mode = chmod
		}
		fmt.Fprintf(&b, "chmod %s %s\nchown %s %s\n", mode, q, shQuote(owner), q)
	}
	return b.String()
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// dockerfileJob is what `space template build NAME --dockerfile FILE` was
// asked.
type dockerfileJob struct {
	name, file, contextDir, runtime string
	egress                          []byte
	buildArgs                       map[string]string
	noCache                         bool
}

// dockerfileBuild runs `space template build NAME --dockerfile FILE`.
func dockerfileBuild(ctx context.Context, e *env, job dockerfileJob, wait time.Duration) (*sandboxv1.Template, error) {
	f, err := os.Open(job.file)
	if err != nil {
		return nil, fmt.Errorf("--dockerfile: %w", err)
	}
	df, err := dockerfile.Parse(f, job.buildArgs)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", job.file, err)
	}
	if strings.Contains(df.From, ":") || strings.Contains(df.From, "/") {
		return nil, fmt.Errorf("%s: FROM %s: not a SPACE template name; import an image first (space template build BASE --from oci:DIR) and write FROM BASE", job.file, printable(df.From))
	}
	cfgJSON, err := dockerfile.ImageConfigJSON(df)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", job.file, err)
	}
	keys, err := stepKeys(df, job.contextDir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", job.file, err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := templateFree(ctx, e.c, job.name); err != nil {
		return nil, err
	}
	// Cleanup runs even after Ctrl-C cancelled ctx.
	cleanupCtx := context.WithoutCancel(ctx)
	holders, err := cacheHolders(ctx, e.c)
	if err != nil {
		return nil, fmt.Errorf("step cache: %w", err)
	}
	cached, from := 0, cacheEntry{}
	if !job.noCache {
		idx, err := cacheIndex(ctx, e.c, holders)
		if err != nil {
			return nil, err
		}
		cached, from = cachedPrefix(df.Steps, keys, idx)
	}
	sb, err := buildSandbox(ctx, e, df.From, job, from)
	if err != nil {
		return nil, err
	}
	// The build sandbox becomes a cache holder once it holds a cached step
	// and the build succeeded; otherwise it is removed.
	holds, ok := false, false
	defer func() {
		if holds && ok {
			err := keepHolder(cleanupCtx, e.c, sb.ID)
			if err == nil {
				return
			}
			fmt.Fprintf(e.stderr, "space: warning: %v; removing it\n", err)
		}
		if err := e.c.DeleteSandbox(cleanupCtx, sb.ID); err != nil {
			fmt.Fprintf(e.stderr, "space: warning: remove build sandbox %s: %v\n", sb.ID, err)
		}
	}()
	st := &buildState{env: map[string]string{}}
	total := len(df.Steps)
	for i, in := range df.Steps {
		if i < cached {
			fmt.Fprintf(e.stderr, "step %d/%d: cached: %s\n", i+1, total, printable(stepLine(in)))
			st.apply(in)
			continue
		}
		fmt.Fprintf(e.stderr, "step %d/%d: %s\n", i+1, total, printable(stepLine(in)))
		if err := runBuildStep(ctx, e, sb.ID, job.contextDir, st, in); err != nil {
			return nil, err
		}
		if changesFS(in) {
			if err := cacheStep(ctx, e, sb.ID, keys[i]); err != nil {
				return nil, err
			}
			holds = true
		}
	}
	t, err := finishBuild(ctx, cleanupCtx, e, sb.ID, job, cfgJSON)
	if err != nil {
		return nil, err
	}
	ok = true
	if holds {
		// The new holder counts among the kept.
		if _, err := pruneHolders(ctx, e, holders, job.name, cacheKeep-1, sb.ID); err != nil {
			fmt.Fprintf(e.stderr, "space: warning: %v\n", err)
		}
	}
	return t, nil
}

// templateFree refuses, before any step runs, a name the server would
// refuse at the end (a template is replaced only after a delete).
func templateFree(ctx context.Context, c *space.Client, name string) error {
	list, err := c.ListTemplates(ctx)
	if err != nil {
		return err
	}
	for _, t := range list {
		if t.Name == name && (t.State == "ready" || t.State == "building") {
			return fmt.Errorf("template %s exists; delete it first (space template delete %s): the step cache outlives it, so the rebuild reruns only what changed", printable(name), printable(name))
		}
	}
	return nil
}

// buildSandbox is the build's sandbox, running: a fork of the holder of
// the last cached step from its snapshot, or a new sandbox from the FROM
// template.
func buildSandbox(ctx context.Context, e *env, base string, job dockerfileJob, from cacheEntry) (*sandboxv1.Sandbox, error) {
	var sb *sandboxv1.Sandbox
	var err error
	if from.snapshot != "" {
		sb, err = e.c.ForkSandbox(ctx, from.holder, sandboxv1.ForkRequest{Snapshot: from.snapshot})
		if err != nil {
			return nil, fmt.Errorf("build sandbox from cached snapshot %s of %s: %w", from.snapshot, from.holder, err)
		}
		// The fork has its holder's lifetime; a build has its own.
		if _, err := e.c.SetTimeout(ctx, sb.ID, "2h"); err != nil {
			_ = e.c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
			return nil, fmt.Errorf("build sandbox %s: timeout: %w", sb.ID, err)
		}
	} else {
		sb, err = e.c.CreateSandbox(ctx, sandboxv1.CreateSandboxRequest{
			Template: base, Runtime: job.runtime, Timeout: "2h",
			Metadata: map[string]string{cacheLabel: job.name},
		})
		if err != nil {
			return nil, fmt.Errorf("build sandbox from %s: %w", printable(base), err)
		}
	}
	if sb.State != sandboxv1.StateRunning {
		running, err := e.c.WaitForState(ctx, sb.ID, sandboxv1.StateRunning)
		if err != nil {
			_ = e.c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
			return nil, err
		}
		sb = running
	}
	return sb, nil
}

// runBuildStep runs one step in build sandbox id.
func runBuildStep(ctx context.Context, e *env, id, contextDir string, st *buildState, in dockerfile.Instruction) error {
	if st.apply(in) {
		if in.Cmd == "WORKDIR" {
			if err := mkdirs(ctx, e, id, st.workdir); err != nil {
				return fmt.Errorf("line %d: %w", in.Line, err)
			}
		}
		return nil
	}
	switch in.Cmd {
	case "RUN":
		return runStep(ctx, e, id, st, in)
	case "COPY", "ADD":
		return copyStep(ctx, e, id, contextDir, st, in)
	}
	// CMD, ENTRYPOINT, EXPOSE, LABEL, ARG: recorded in the image config.
	return nil
}

// cacheStep takes the cached snapshot of a step: a disk snapshot named
// after its key.
func cacheStep(ctx context.Context, e *env, id, key string) error {
	name, err := cacheName(key)
	if err != nil {
		return err
	}
	if _, err := readySnapshot(ctx, e.c, id, name); err != nil {
		return fmt.Errorf("step cache: %w", err)
	}
	return nil
}

// finishBuild writes the image config in build sandbox id, snapshots it and
// builds the template from that snapshot, which it then deletes.
func finishBuild(ctx, cleanupCtx context.Context, e *env, id string, job dockerfileJob, cfgJSON []byte) (*sandboxv1.Template, error) {
	if err := mkdirs(ctx, e, id, path.Dir(imagecfg.Path)); err != nil {
		return nil, err
	}
	if err := e.c.WriteFile(ctx, id, imagecfg.Path, strings.NewReader(string(cfgJSON))); err != nil {
		return nil, err
	}
	snapID, err := readySnapshot(ctx, e.c, id, "")
	if snapID != "" {
		defer func() {
			if err := e.c.DeleteSnapshot(cleanupCtx, id, snapID); err != nil {
				fmt.Fprintf(e.stderr, "space: warning: remove build snapshot %s: %v\n", snapID, err)
			}
		}()
	}
	if err != nil {
		return nil, err
	}
	t, err := e.c.BuildTemplate(ctx, sandboxv1.BuildTemplateRequest{Name: job.name, From: "snapshot:" + snapID, Egress: job.egress})
	if err != nil {
		return nil, err
	}
	if t.State != "ready" {
		if t, err = e.c.WaitForTemplate(ctx, job.name, nil); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// runStep runs a RUN step, streaming its output to stderr; a non-zero exit
// fails the build with the step's line and exit code.
func runStep(ctx context.Context, e *env, id string, st *buildState, in dockerfile.Instruction) error {
	tail := &tailWriter{max: 2048}
	w := io.MultiWriter(e.stderr, tail)
	s, err := e.c.StartExec(ctx, id, st.runStart(in), space.StreamOptions{Stdout: w, Stderr: w})
	if err != nil {
		return fmt.Errorf("line %d: RUN: %w", in.Line, err)
	}
	defer s.Close()
	code, err := s.Wait()
	if err != nil {
		return fmt.Errorf("line %d: RUN: %w", in.Line, err)
	}
	if code != 0 {
		return fmt.Errorf("line %d: RUN %s: exit code %d; its last output:\n%s", in.Line, printable(in.Args[0]), code, tail.String())
	}
	return nil
}

func copyStep(ctx context.Context, e *env, id, contextDir string, st *buildState, in dockerfile.Instruction) error {
	entries, err := copyPlan(contextDir, st, in)
	if err != nil {
		return err
	}
	var dirs []string
	for _, ent := range entries {
		if ent.link == "" && ent.mode.IsDir() {
			dirs = append(dirs, ent.dest)
		} else {
			dirs = append(dirs, path.Dir(ent.dest))
		}
	}
	if err := mkdirs(ctx, e, id, dirs...); err != nil {
		return fmt.Errorf("line %d: %w", in.Line, err)
	}
	for _, ent := range entries {
		if ent.link != "" || ent.mode.IsDir() {
			continue
		}
		f, err := os.Open(ent.host)
		if err != nil {
			return fmt.Errorf("line %d: %w", in.Line, err)
		}
		err = e.c.WriteFile(ctx, id, ent.dest, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("line %d: %w", in.Line, err)
		}
	}
	res, err := e.c.Exec(ctx, id, sandboxv1.ExecRequest{Cmd: []string{"/bin/sh", "-c", fixupScript(entries, in.Flags["chown"], in.Flags["chmod"])}, User: "root", Timeout: "10m"})
	if err != nil {
		return fmt.Errorf("line %d: %s: set modes and owners: %w", in.Line, in.Cmd, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("line %d: %s: set modes and owners: exit code %d: %s", in.Line, in.Cmd, res.ExitCode, printable(res.Stderr))
	}
	return nil
}

// mkdirs creates directories (and their parents; existing ones are kept) in
// the build sandbox, as root.
func mkdirs(ctx context.Context, e *env, id string, dirs ...string) error {
	cmd := append([]string{"mkdir", "-p", "--"}, dirs...)
	res, err := e.c.Exec(ctx, id, sandboxv1.ExecRequest{Cmd: cmd, User: "root"})
	if err != nil {
		return fmt.Errorf("mkdir %s: %w", strings.Join(dirs, " "), err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("mkdir %s: exit code %d: %s", strings.Join(dirs, " "), res.ExitCode, printable(res.Stderr))
	}
	return nil
}

// stepLine is a step as the build log shows it.
func stepLine(in dockerfile.Instruction) string {
	if in.JSON {
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(in.Args)
		return in.Cmd + " " + strings.TrimSuffix(b.String(), "\n")
	}
	return in.Cmd + " " + strings.Join(in.Args, " ")
}

// readySnapshot takes a disk snapshot of id (named name, unless empty) and
// waits until it is ready; it
// returns the id whenever the server assigned one, so it can be deleted.
func readySnapshot(ctx context.Context, c *space.Client, id, name string) (string, error) {
	s, err := c.CreateSnapshot(ctx, id, sandboxv1.CreateSnapshotRequest{Kind: sandboxv1.SnapshotDisk, Name: name})
	if err != nil {
		return "", err
	}
	for s.State != "ready" {
		if s.State == "failed" {
			return s.ID, fmt.Errorf("snapshot %s of the build sandbox failed: %s", s.ID, printable(s.Reason))
		}
		select {
		case <-ctx.Done():
			return s.ID, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		list, err := c.ListSnapshots(ctx, id)
		if err != nil {
			return s.ID, err
		}
		for i := range list {
			if list[i].ID == s.ID {
				s = &list[i]
			}
		}
	}
	return s.ID, nil
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string { return string(t.buf) }
