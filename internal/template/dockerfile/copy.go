package dockerfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// parseCopy fills a COPY or ADD instruction: flags (--chown, --chmod), then
// sources and a destination, in shell or JSON form.
func parseCopy(in *Instruction, rest string, lookup func(string) (string, bool)) error {
	cmd := in.Cmd
	for strings.HasPrefix(rest, "--") {
		flag, r := splitKeyword(rest)
		rest = r
		k, v, _ := strings.Cut(flag[2:], "=")
		switch k {
		case "chown", "chmod":
			if v == "" {
				return errf(in.Line, "%s --%s needs a value", cmd, k)
			}
			v, err := substitute(v, lookup)
			if err != nil {
				return errf(in.Line, "%s --%s: %v", cmd, k, err)
			}
			if in.Flags == nil {
				in.Flags = map[string]string{}
			}
			in.Flags[k] = v
		case "from":
			return errf(in.Line, "%s --from is not supported: multi-stage builds are not supported; build the stage as a template and FROM it", cmd)
		default:
			return errf(in.Line, "%s --%s is not supported: only --chown and --chmod are", cmd, k)
		}
	}
	var words []string
	if strings.HasPrefix(rest, "[") {
		if err := json.Unmarshal([]byte(rest), &words); err != nil {
			return errf(in.Line, "%s: JSON form: %v", cmd, err)
		}
		for i, w := range words {
			s, err := substitute(w, lookup)
			if err != nil {
				return errf(in.Line, "%s: %v", cmd, err)
			}
			words[i] = s
		}
	} else {
		ws, err := splitWords(rest)
		if err != nil {
			return errf(in.Line, "%s: %v", cmd, err)
		}
		for _, w := range ws {
			s, err := substitute(w, lookup)
			if err != nil {
				return errf(in.Line, "%s: %v", cmd, err)
			}
			words = append(words, s)
		}
	}
	if len(words) < 2 {
		return errf(in.Line, "%s needs at least one source and a destination", cmd)
	}
	for _, src := range words[:len(words)-1] {
		if cmd == "ADD" {
			if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
				return errf(in.Line, "ADD is not supported from a URL (%s): no network at parse time; fetch it in a RUN step, which runs under the template's egress policy", src)
			}
		}
		if strings.ContainsAny(src, "*?[") {
			return errf(in.Line, "%s: wildcards (%s) are not supported: name the files or a directory", cmd, src)
		}
		if _, err := cleanSource(src); err != nil {
			return errf(in.Line, "%s: %v", cmd, err)
		}
	}
	dst := words[len(words)-1]
	if dst == "" {
		return errf(in.Line, "%s: empty destination", cmd)
	}
	if len(words) > 2 && !strings.HasSuffix(dst, "/") {
		return errf(in.Line, "%s: with several sources the destination must be a directory ending in /, got %q", cmd, dst)
	}
	in.Args = words
	return nil
}

// ErrOutsideContext marks a COPY source that names or reaches (by .. or a
// symlink) something outside the build context.
var ErrOutsideContext = errors.New("outside the build context")

// cleanSource turns a COPY source into a slash path relative to the context
// root, refusing any that climbs out with "..". Absolute sources are relative
// to the context, as in Docker.
func cleanSource(src string) (string, error) {
	if src == "" || strings.ContainsRune(src, 0) {
		return "", fmt.Errorf("source %q: empty or NUL: %w", src, ErrOutsideContext)
	}
	p := path.Clean("/" + src)
	// Clean("/" + x) can never climb above "/"; check the raw path instead,
	// since Docker itself would refuse "../x" and so should we, loudly.
	depth := 0
	for _, part := range strings.Split(src, "/") {
		switch part {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return "", fmt.Errorf("source %q: climbs out with ..: %w", src, ErrOutsideContext)
			}
		default:
			depth++
		}
	}
	return strings.TrimPrefix(p, "/"), nil
}

// ResolveSource maps a COPY source onto the host path inside contextDir it
// names, following symlinks only while they stay inside contextDir. A path
// that leaves the context by "..", an absolute symlink target outside, or a
// chain of links is refused with ErrOutsideContext. The returned path has no
// symlink in any component, so a later open of it reaches what was checked
// (the builder owns the context while it builds: it is not a race defence
// against a writer changing the context meanwhile).
func ResolveSource(contextDir, src string) (string, error) {
	rootAbs, err := filepath.Abs(contextDir)
	if err != nil {
		return "", fmt.Errorf("context %s: %w", contextDir, err)
	}
	root, err := filepath.EvalSymlinks(rootAbs)
	if err != nil {
		return "", fmt.Errorf("context %s: %w", contextDir, err)
	}
	rel, err := cleanSource(src)
	if err != nil {
		return "", err
	}
	todo := splitRel(rel)
	var done []string // components resolved so far, each a real non-link entry
	for links := 0; len(todo) > 0; {
		part := todo[0]
		todo = todo[1:]
		if part == ".." {
			if len(done) == 0 {
				return "", fmt.Errorf("source %q: a symlink climbs out of the context: %w", src, ErrOutsideContext)
			}
			done = done[:len(done)-1]
			continue
		}
		cur := filepath.Join(append([]string{root}, append(done, part)...)...)
		fi, err := os.Lstat(cur)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return "", fmt.Errorf("source %q: %s does not exist in the context", src, path.Join(append(done, part)...))
			}
			return "", fmt.Errorf("source %q: %w", src, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			done = append(done, part)
			continue
		}
		if links++; links > 40 {
			return "", fmt.Errorf("source %q: too many symlinks", src)
		}
		target, err := os.Readlink(cur)
		if err != nil {
			return "", fmt.Errorf("source %q: %w", src, err)
		}
		if filepath.IsAbs(target) {
			// An absolute link names a host path; inside the context it is
			// allowed only if it points back into the context itself.
			r, err := filepath.Rel(root, filepath.Clean(target))
			if err != nil || r == ".." || strings.HasPrefix(r, "../") {
				return "", fmt.Errorf("source %q: symlink %s -> %s: %w", src, path.Join(append(done, part)...), target, ErrOutsideContext)
			}
			done = nil
			target = r
		}
		todo = append(splitRel(filepath.ToSlash(target)), todo...)
	}
	return filepath.Join(append([]string{root}, done...)...), nil
}

func splitRel(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" && s != "." {
			out = append(out, s)
		}
	}
	return out
}
