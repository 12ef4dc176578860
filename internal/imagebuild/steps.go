package imagebuild

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"

	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/template/dockerfile"
)

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
	if u := in.Flags["user"]; u != "" {
		user = u // an E2B runCmd's own user
	}
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
	// owner, when not nil, is the owner an ADDed archive gave the entry;
	// nil is root's (COPY, as Docker's).
	owner *template.Owner
}

// MaxSandboxID is the largest uid and gid an ADDed archive may give its
// files: a build runs in an ns sandbox, whose user namespace maps ids 0 to
// 65535 (ns.RangeSize), so a chown to a larger id fails in the sandbox. An archive naming one is
// refused with its line, as Docker refuses ids its user-namespace remapping
// cannot map, rather than clamped to some other owner the archive did not
// ask for; --chown overrides the archive's owners and so accepts it.
const MaxSandboxID = 65535

// copyPlan lists what COPY/ADD in copies from contextDir, with Docker's
// destination rules: a directory source copies its contents; several
// sources or a destination ending in / make the destination a directory.
// Sources are confined to the context (dockerfile.ResolveSource).
//
// ADD of a local tar archive (plain, gzip, bzip2, xz or zstd, known by its
// content) extracts it into the destination directory, as Docker does:
// it is unpacked into a new directory under tmp with template.ExtractIfArchive
// (no absolute names or "..", nothing written through a symlink, no
// devices, addLimits) and copied as a directory source is. Any other file
// is copied as a file. The extracted entries keep the archive's modes and
// owners (within MaxSandboxID) unless the step has --chown, as Docker's.
func copyPlan(ctx context.Context, contextDir, tmp string, s *buildState, in dockerfile.Instruction) ([]copyEntry, error) {
	srcs, rawDest := in.Args[:len(in.Args)-1], in.Args[len(in.Args)-1]
	dest := s.abs(rawDest)
	intoDir := strings.HasSuffix(rawDest, "/") || len(srcs) > 1
	var out []copyEntry
	for n, src := range srcs {
		p, err := dockerfile.ResolveSource(contextDir, src)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s %s: %w", in.Line, in.Cmd, src, err)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s %s: %w", in.Line, in.Cmd, src, err)
		}
		extracted := false
		var owners map[string]template.Owner
		if in.Cmd == "ADD" && fi.Mode().IsRegular() {
			x := filepath.Join(tmp, strconv.Itoa(n))
			if err := os.Mkdir(x, 0o755); err != nil {
				return nil, fmt.Errorf("line %d: ADD %s: %w", in.Line, src, err)
			}
			if owners, extracted, err = template.ExtractIfArchive(ctx, p, x, addLimits); err != nil {
				return nil, fmt.Errorf("line %d: ADD %s: extract the archive: %w", in.Line, src, err)
			}
			if extracted {
				if fi, err = os.Lstat(x); err != nil {
					return nil, fmt.Errorf("line %d: ADD %s: %w", in.Line, src, err)
				}
				p = x
			}
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
			if extracted && rel == "." {
				// The destination keeps its own mode and owner: the
				// directory unpacked into is not the archive's.
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			e := copyEntry{host: hp, dest: path.Join(base, filepath.ToSlash(rel)), mode: info.Mode()}
			if extracted && in.Flags["chown"] == "" {
				o, ok := owners[filepath.ToSlash(rel)]
				if !ok {
					// A parent the archive has no entry of: root's, as
					// Docker makes it.
					o = template.Owner{}
				}
				if o.UID < 0 || o.UID > MaxSandboxID || o.GID < 0 || o.GID > MaxSandboxID {
					return fmt.Errorf("entry %s: owner %d:%d: a sandbox has uids and gids 0 to %d only; set the owner with ADD --chown=USER:GROUP", printable(filepath.ToSlash(rel)), o.UID, o.GID, MaxSandboxID)
				}
				e.owner = &o
			}
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

// fixupScript sets what the files API does not: owners (--chown, an ADDed
// archive's, or root as Docker does), modes (setuid, setgid and sticky
// bits included, set after the owner, whose change clears them) and
// symlinks.
func fixupScript(entries []copyEntry, chown, chmod string) string {
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, e := range entries {
		q := shQuote(e.dest)
		owner := "0:0"
		switch {
		case chown != "":
			owner = chown
		case e.owner != nil:
			owner = fmt.Sprintf("%d:%d", e.owner.UID, e.owner.GID)
		}
		if e.link != "" {
			fmt.Fprintf(&b, "rm -rf %s; ln -s %s %s\n", q, shQuote(e.link), q)
			fmt.Fprintf(&b, "chown -h %s %s\n", shQuote(owner), q)
			continue
		}
		mode := fmt.Sprintf("%o", unixMode(e.mode))
		if chmod != "" {
			mode = chmod
		}
		fmt.Fprintf(&b, "chown %s %s\nchmod %s %s\n", shQuote(owner), q, mode, q)
	}
	return b.String()
}

// unixMode is m's permission bits with its setuid, setgid and sticky bits
// as chmod reads them.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// runBuildStep runs one step in build sandbox id.
func runBuildStep(ctx context.Context, b Backend, id string, job Job, st *buildState, in dockerfile.Instruction) error {
	if st.apply(in) {
		if in.Cmd == "WORKDIR" {
			if err := mkdirs(ctx, b, id, st.workdir); err != nil {
				return fmt.Errorf("line %d: %w", in.Line, err)
			}
		}
		return nil
	}
	switch in.Cmd {
	case "RUN":
		return runStep(ctx, b, id, job.Log, st, in)
	case "COPY", "ADD":
		return copyStep(ctx, b, id, job.ContextDir, st, in)
	}
	// CMD, ENTRYPOINT, EXPOSE, LABEL, ARG: recorded in the image config.
	return nil
}

// runStep runs a RUN step, streaming its output to log; a non-zero exit
// fails the build with the step's line and exit code.
func runStep(ctx context.Context, b Backend, id string, log io.Writer, st *buildState, in dockerfile.Instruction) error {
	tail := &tailWriter{max: 2048}
	w := io.MultiWriter(log, tail)
	code, err := b.Exec(ctx, id, st.runStart(in), w, w)
	if err != nil {
		return fmt.Errorf("line %d: RUN: %w", in.Line, err)
	}
	if code != 0 {
		return fmt.Errorf("line %d: RUN %s: exit code %d; its last output:\n%s", in.Line, printable(in.Args[0]), code, tail.String())
	}
	return nil
}

// copyStep runs a COPY or ADD step: the files written, then their modes,
// owners and symlinks set by a script.
func copyStep(ctx context.Context, b Backend, id, contextDir string, st *buildState, in dockerfile.Instruction) error {
	tmp, err := os.MkdirTemp("", "space-add-")
	if err != nil {
		return fmt.Errorf("line %d: %s: %w", in.Line, in.Cmd, err)
	}
	defer os.RemoveAll(tmp)
	entries, err := copyPlan(ctx, contextDir, tmp, st, in)
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
	if err := mkdirs(ctx, b, id, dirs...); err != nil {
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
		err = b.WriteFile(ctx, id, ent.dest, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("line %d: %w", in.Line, err)
		}
	}
	fctx, cancel := context.WithTimeout(ctx, fixupTimeout)
	defer cancel()
	code, stderr, err := execOut(fctx, b, id, []string{"/bin/sh", "-c", fixupScript(entries, in.Flags["chown"], in.Flags["chmod"])})
	if err != nil {
		return fmt.Errorf("line %d: %s: set modes and owners: %w", in.Line, in.Cmd, err)
	}
	if code != 0 {
		return fmt.Errorf("line %d: %s: set modes and owners: exit code %d: %s", in.Line, in.Cmd, code, printable(stderr))
	}
	return nil
}

// addLimits bound what an ADD unpacks of one archive on the client.
var addLimits = template.Limits{MaxBytes: 16 << 30, MaxEntries: 1 << 20}

// fixupTimeout bounds the script that sets a COPY's modes and owners.
const fixupTimeout = 10 * time.Minute

// mkdirs creates directories (and their parents; existing ones are kept) in
// the build sandbox, as root.
func mkdirs(ctx context.Context, b Backend, id string, dirs ...string) error {
	cmd := append([]string{"mkdir", "-p", "--"}, dirs...)
	code, stderr, err := execOut(ctx, b, id, cmd)
	if err != nil {
		return fmt.Errorf("mkdir %s: %w", strings.Join(dirs, " "), err)
	}
	if code != 0 {
		return fmt.Errorf("mkdir %s: exit code %d: %s", strings.Join(dirs, " "), code, printable(stderr))
	}
	return nil
}

// execOut runs cmd as root in sandbox id and returns its exit code and
// the last of its stderr.
func execOut(ctx context.Context, b Backend, id string, cmd []string) (int, string, error) {
	stderr := &tailWriter{max: 4096}
	code, err := b.Exec(ctx, id, sandboxv1.ExecStart{Cmd: cmd, User: "root"}, io.Discard, stderr)
	return code, stderr.String(), err
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
