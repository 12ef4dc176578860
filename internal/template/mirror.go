package template

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultMirror is the Debian archive used when the host's apt configuration
// names none.
const DefaultMirror = "http://deb.debian.org/debian"

// aptSource is one "deb" entry of an apt configuration.
type aptSource struct {
	URI        string
	Suites     []string
	Components []string
}

// HostMirror returns the Debian archive this machine's apt uses for suite
// (from /etc/apt/sources.list and /etc/apt/sources.list.d/*.list and
// *.sources), so templates are fetched through the same mirror or proxy as the
// host's own packages. It falls back to DefaultMirror.
func HostMirror(suite string) string {
	var sources []aptSource
	if b, err := os.ReadFile("/etc/apt/sources.list"); err == nil {
		sources = append(sources, parseSourcesList(string(b))...)
	}
	for _, pattern := range []string{"*.list", "*.sources"} {
		files, _ := filepath.Glob(filepath.Join("/etc/apt/sources.list.d", pattern))
		slices.Sort(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			if strings.HasSuffix(f, ".sources") {
				sources = append(sources, parseDeb822(string(b))...)
			} else {
				sources = append(sources, parseSourcesList(string(b))...)
			}
		}
	}
	if m, ok := pickMirror(sources, suite); ok {
		return m
	}
	return DefaultMirror
}

// pickMirror chooses the entry that carries suite's main component; else the
// first entry with main for a plain release name that is not a security
// archive.
func pickMirror(sources []aptSource, suite string) (string, bool) {
	usable := func(s aptSource) bool {
		return slices.Contains(s.Components, "main") &&
			(strings.HasPrefix(s.URI, "http://") || strings.HasPrefix(s.URI, "https://") || strings.HasPrefix(s.URI, "file:/"))
	}
	for _, s := range sources {
		if usable(s) && slices.Contains(s.Suites, suite) {
			return strings.TrimSuffix(s.URI, "/"), true
		}
	}
	for _, s := range sources {
		if usable(s) && !strings.Contains(s.URI, "security") &&
			slices.ContainsFunc(s.Suites, func(x string) bool { return validSuite(x) && !strings.Contains(x, "-") }) {
			return strings.TrimSuffix(s.URI, "/"), true
		}
	}
	return "", false
}

// parseSourcesList reads the one-line format: "deb [opts] URI SUITE COMP…".
func parseSourcesList(text string) []aptSource {
	var out []aptSource
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // options, possibly several fields
			i := slices.IndexFunc(f, func(s string) bool { return strings.HasSuffix(s, "]") })
			if i < 0 {
				continue
			}
			f = f[i+1:]
		}
		if len(f) < 2 {
			continue
		}
		out = append(out, aptSource{URI: f[0], Suites: []string{f[1]}, Components: f[2:]})
	}
	return out
}

// parseDeb822 reads the deb822 format of *.sources files: stanzas of
// "Field: value" lines separated by blank lines.
func parseDeb822(text string) []aptSource {
	var out []aptSource
	fields := map[string]string{}
	flush := func() {
		if len(fields) > 0 && slices.Contains(strings.Fields(fields["types"]), "deb") &&
			!strings.EqualFold(strings.TrimSpace(fields["enabled"]), "no") {
			for _, uri := range strings.Fields(fields["uris"]) {
				out = append(out, aptSource{URI: uri, Suites: strings.Fields(fields["suites"]),
					Components: strings.Fields(fields["components"])})
			}
		}
		fields = map[string]string{}
	}
	last := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
			flush()
		case strings.HasPrefix(line, "#"):
		case line[0] == ' ' || line[0] == '\t': // continuation
			if last != "" {
				fields[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(k))
			fields[last] = strings.TrimSpace(v)
		}
	}
	flush()
	return out
}
