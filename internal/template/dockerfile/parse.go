// Package dockerfile parses the subset of Dockerfile syntax that SPACE builds
// templates from: one FROM (a SPACE template name, or an oci:/docker-archive:
// source), then RUN, COPY, ADD (local files), ENV, ARG, WORKDIR, USER, LABEL,
// EXPOSE, CMD and ENTRYPOINT. Everything else is refused with its line number
// and the reason, never silently skipped.
package dockerfile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Instruction is one parsed step, after ARG/ENV substitution where Docker
// applies it (not in RUN, CMD or ENTRYPOINT: the shell does that).
type Instruction struct {
	Line int    // 1-based line the instruction starts on
	Cmd  string // upper-case keyword: RUN, COPY, ...
	// Args: RUN/CMD/ENTRYPOINT in shell form hold one string (the command
	// line); in JSON form, the array. COPY/ADD: sources then the destination.
	// ENV/LABEL: key, value, key, value... EXPOSE: ports. Others: one value.
	Args  []string
	JSON  bool              // RUN/CMD/ENTRYPOINT written as a JSON array
	Flags map[string]string // COPY/ADD --chown, --chmod
	Text  string            // the instruction as executed: keyword and substituted arguments; part of the cache key
}

// File is a parsed Dockerfile.
type File struct {
	From  string // the FROM source, substituted
	Steps []Instruction
	Notes []string // what was accepted but ignored (parser directives)
}

// Error is a refusal at a line.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

func errf(line int, format string, a ...any) error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, a...)}
}

// unsupported says why each instruction SPACE does not build is refused.
var unsupported = map[string]string{
	"ONBUILD":     "triggers for child builds are not recorded in SPACE templates",
	"HEALTHCHECK": "SPACE templates have no container health checks; check readiness in the start command",
	"VOLUME":      "SPACE sandboxes have no anonymous volumes; attach a volume when creating the sandbox",
	"SHELL":       "RUN always uses /bin/sh -c; write the shell into the RUN line",
	"STOPSIGNAL":  "SPACE stops sandboxes itself; there is no per-template stop signal",
	"MAINTAINER":  "deprecated by Docker; use LABEL maintainer=...",
}

const maxLine = 1 << 20 // one logical instruction, bytes

// Parse reads a Dockerfile. buildArgs override ARG defaults (--build-arg).
func Parse(r io.Reader, buildArgs map[string]string) (*File, error) {
	lines, notes, err := logicalLines(r)
	if err != nil {
		return nil, err
	}
	f := &File{Notes: notes}
	args := map[string]string{} // declared ARGs in scope
	env := map[string]string{}  // ENV so far
	lookup := func(k string) (string, bool) {
		if v, ok := env[k]; ok {
			return v, true
		}
		v, ok := args[k]
		return v, ok
	}
	for _, ll := range lines {
		kw, rest := splitKeyword(ll.text)
		cmd := strings.ToUpper(kw)
		if why, ok := unsupported[cmd]; ok {
			return nil, errf(ll.line, "%s is not supported: %s", cmd, why)
		}
		if f.From == "" && cmd != "FROM" && cmd != "ARG" {
			return nil, errf(ll.line, "%s before FROM: a Dockerfile starts with FROM (only ARG may come first)", cmd)
		}
		if cmd != "FROM" && cmd != "ARG" && rest == "" {
			return nil, errf(ll.line, "%s needs arguments", cmd)
		}
		if strings.Contains(rest, "<<") && (cmd == "RUN" || cmd == "COPY" || cmd == "ADD") && hasHeredoc(rest) {
			return nil, errf(ll.line, "%s is not supported with a heredoc (<<WORD): write the file with COPY or the commands on one RUN line", cmd)
		}
		in := Instruction{Line: ll.line, Cmd: cmd}
		switch cmd {
		case "FROM":
			if f.From != "" {
				return nil, errf(ll.line, "FROM is not supported a second time: multi-stage builds are not supported; build each stage as its own template")
			}
			if strings.HasPrefix(rest, "--") {
				return nil, errf(ll.line, "FROM is not supported with flags (%s): SPACE templates are built for the host's platform", firstWord(rest))
			}
			s, err := substitute(rest, lookup)
			if err != nil {
				return nil, errf(ll.line, "FROM: %v", err)
			}
			w := strings.Fields(s)
			switch {
			case len(w) == 0:
				return nil, errf(ll.line, "FROM needs a source: a SPACE template name, oci:DIR or docker-archive:FILE")
			case len(w) == 3 && strings.EqualFold(w[1], "AS"):
				return nil, errf(ll.line, "FROM is not supported with AS: multi-stage builds are not supported; build each stage as its own template")
			case len(w) != 1:
				return nil, errf(ll.line, "FROM takes one source, got %q", s)
			}
			f.From = w[0]
			// ARGs declared before FROM are only usable in FROM (Docker's rule).
			args = map[string]string{}
			in.Args = []string{w[0]}
		case "ARG":
			words, err := splitWords(rest)
			if err != nil {
				return nil, errf(ll.line, "ARG: %v", err)
			}
			if len(words) == 0 {
				return nil, errf(ll.line, "ARG needs a name")
			}
			for _, w := range words {
				k, v, hasDefault := strings.Cut(w, "=")
				if !validName(k) {
					return nil, errf(ll.line, "ARG: %q is not a valid name (letters, digits, _; not starting with a digit)", k)
				}
				if hasDefault {
					if v, err = substitute(v, lookup); err != nil {
						return nil, errf(ll.line, "ARG %s: %v", k, err)
					}
				}
				if bv, ok := buildArgs[k]; ok {
					v = bv
				}
				args[k] = v
				in.Args = append(in.Args, k, v)
			}
		case "ENV", "LABEL":
			kv, err := keyValues(cmd, rest, lookup)
			if err != nil {
				return nil, errf(ll.line, "%s: %v", cmd, err)
			}
			for i := 0; i < len(kv); i += 2 {
				if cmd == "ENV" {
					if !validName(kv[i]) {
						return nil, errf(ll.line, "ENV: %q is not a valid variable name", kv[i])
					}
					env[kv[i]] = kv[i+1]
				}
			}
			in.Args = kv
		case "RUN", "CMD", "ENTRYPOINT":
			a, isJSON, err := commandForm(rest)
			if err != nil {
				return nil, errf(ll.line, "%s: %v", cmd, err)
			}
			if cmd == "RUN" && strings.HasPrefix(rest, "--") {
				return nil, errf(ll.line, "RUN is not supported with flags (%s): mounts and network modes are BuildKit features; the sandbox's egress policy applies", firstWord(rest))
			}
			in.Args, in.JSON = a, isJSON
		case "COPY", "ADD":
			if err := parseCopy(&in, rest, lookup); err != nil {
				return nil, err
			}
		case "WORKDIR", "USER":
			s, err := substitute(rest, lookup)
			if err != nil {
				return nil, errf(ll.line, "%s: %v", cmd, err)
			}
			s = strings.TrimSpace(s)
			if cmd == "USER" && strings.ContainsAny(s, " \t") {
				return nil, errf(ll.line, "USER takes one user[:group], got %q", s)
			}
			if s == "" {
				return nil, errf(ll.line, "%s is empty after substitution", cmd)
			}
			in.Args = []string{s}
		case "EXPOSE":
			s, err := substitute(rest, lookup)
			if err != nil {
				return nil, errf(ll.line, "EXPOSE: %v", err)
			}
			for _, p := range strings.Fields(s) {
				if err := validPort(p); err != nil {
					return nil, errf(ll.line, "EXPOSE: %v", err)
				}
				in.Args = append(in.Args, p)
			}
		default:
			return nil, errf(ll.line, "%s is not supported: not a Dockerfile instruction SPACE knows (supported: FROM RUN COPY ADD ENV ARG WORKDIR USER LABEL EXPOSE CMD ENTRYPOINT)", cmd)
		}
		in.Text = canonical(in)
		if cmd != "FROM" && cmd != "ARG" {
			f.Steps = append(f.Steps, in)
		} else if cmd == "ARG" && f.From != "" {
			f.Steps = append(f.Steps, in)
		}
	}
	if f.From == "" {
		return nil, &Error{Line: 1, Msg: "no FROM: a Dockerfile starts with FROM TEMPLATE (or oci:DIR, docker-archive:FILE)"}
	}
	return f, nil
}

// canonical is the instruction text after substitution, stable across
// whitespace and comment changes: it feeds the step's cache key.
func canonical(in Instruction) string {
	b, _ := json.Marshal(struct {
		C string
		A []string
		J bool              `json:",omitempty"`
		F map[string]string `json:",omitempty"`
	}{in.Cmd, in.Args, in.JSON, in.Flags})
	return string(b)
}

type logicalLine struct {
	line int
	text string
}

// logicalLines joins continuations, drops comments and blank lines, and
// reads parser directives at the top.
func logicalLines(r io.Reader) ([]logicalLine, []string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	var (
		out        []logicalLine
		notes      []string
		cur        strings.Builder
		start      int
		n          int
		directives = true
	)
	for sc.Scan() {
		n++
		raw := strings.TrimRight(sc.Text(), "\r")
		trimmed := strings.TrimSpace(raw)
		if directives {
			if k, v, ok := directive(trimmed); ok {
				if k == "escape" && v != `\` {
					return nil, nil, errf(n, "parser directive escape=%s is not supported: only the default escape character \\ is", v)
				}
				notes = append(notes, fmt.Sprintf("line %d: parser directive %s=%s ignored", n, k, v))
				continue
			}
			directives = false
		}
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() > 0) {
			continue // comments (also inside continuations) and blank continuation lines
		}
		if trimmed == "" {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(strings.TrimLeft(raw[:strings.LastIndex(raw, `\`)], " \t"), `\`))
			if cur.Len() > maxLine {
				return nil, nil, errf(start, "instruction longer than %d bytes", maxLine)
			}
			continue
		}
		cur.WriteString(strings.TrimLeft(raw, " \t"))
		out = append(out, logicalLine{line: start, text: strings.TrimSpace(cur.String())})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("line %d: read: %w", n+1, err)
	}
	if cur.Len() > 0 {
		out = append(out, logicalLine{line: start, text: strings.TrimSpace(cur.String())})
	}
	return out, notes, nil
}

// directive recognises "# key=value" with a known key at the file's top.
func directive(s string) (k, v string, ok bool) {
	if !strings.HasPrefix(s, "#") {
		return "", "", false
	}
	k, v, ok = strings.Cut(strings.TrimSpace(s[1:]), "=")
	k = strings.ToLower(strings.TrimSpace(k))
	if !ok || (k != "syntax" && k != "escape" && k != "check") {
		return "", "", false
	}
	return k, strings.TrimSpace(v), true
}

func splitKeyword(s string) (string, string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i+1:])
}

func firstWord(s string) string { k, _ := splitKeyword(s); return k }

// hasHeredoc reports a BuildKit heredoc marker: << or <<- followed by a word
// or a quoted word.
func hasHeredoc(s string) bool {
	for i := strings.Index(s, "<<"); i >= 0; {
		j := i + 2
		if j < len(s) && s[j] == '-' {
			j++
		}
		if j < len(s) && (isNameByte(s[j]) || s[j] == '"' || s[j] == '\'') {
			return true
		}
		k := strings.Index(s[i+2:], "<<")
		if k < 0 {
			return false
		}
		i += 2 + k
	}
	return false
}

func isNameByte(c byte) bool {
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

func validName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) {
			return false
		}
	}
	return true
}

func validPort(p string) error {
	num, proto, hasProto := strings.Cut(p, "/")
	if hasProto && proto != "tcp" && proto != "udp" && proto != "sctp" {
		return fmt.Errorf("%q: protocol must be tcp, udp or sctp", p)
	}
	n := 0
	for i := 0; i < len(num); i++ {
		if num[i] < '0' || num[i] > '9' || n > 65535 {
			return fmt.Errorf("%q is not a port (1-65535[/tcp|udp]); ranges are not supported", p)
		}
		n = n*10 + int(num[i]-'0')
	}
	if num == "" || n < 1 || n > 65535 {
		return fmt.Errorf("%q is not a port (1-65535[/tcp|udp])", p)
	}
	return nil
}

// commandForm parses RUN/CMD/ENTRYPOINT: a JSON array of strings, or a shell
// command line kept whole.
func commandForm(rest string) ([]string, bool, error) {
	if strings.HasPrefix(rest, "[") {
		var a []string
		if err := json.Unmarshal([]byte(rest), &a); err == nil {
			if len(a) == 0 {
				return nil, false, fmt.Errorf("empty JSON array")
			}
			return a, true, nil
		}
		// Docker falls back to shell form for an invalid JSON array; so do we.
	}
	return []string{rest}, false, nil
}

// keyValues parses ENV/LABEL: "K=V K2=V2" (quoted and substituted), or the
// legacy "K V" form for ENV (one pair, the rest of the line the value).
func keyValues(cmd, rest string, lookup func(string) (string, bool)) ([]string, error) {
	words, err := splitWords(rest)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("needs key=value")
	}
	if !strings.Contains(words[0], "=") {
		if cmd != "ENV" || len(words) < 2 {
			return nil, fmt.Errorf("%q: want key=value", words[0])
		}
		_, v := splitKeyword(rest)
		v, err := substitute(v, lookup)
		if err != nil {
			return nil, err
		}
		return []string{words[0], v}, nil
	}
	var kv []string
	for _, w := range words {
		k, v, ok := strings.Cut(w, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value", w)
		}
		// Substitution happens on the unquoted word with quotes already
		// removed; splitWords kept $ escapes as \$ so substitute sees them.
		k, err := substitute(k, lookup)
		if err != nil {
			return nil, err
		}
		v, err = substitute(v, lookup)
		if err != nil {
			return nil, err
		}
		kv = append(kv, k, v)
	}
	return kv, nil
}

// splitWords splits on unquoted white space, removing quotes. Backslash
// escapes are resolved except \$, kept for substitute to see as a literal $.
// Single-quoted text has its $ escaped the same way (no substitution inside).
func splitWords(s string) ([]string, error) {
	var (
		out   []string
		cur   strings.Builder
		in    bool
		quote byte
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else if c == '$' || c == '\\' {
				cur.WriteByte('\\')
				cur.WriteByte(c)
			} else {
				cur.WriteByte(c)
			}
		case c == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("trailing backslash")
			}
			i++
			if s[i] == '$' || s[i] == '\\' {
				cur.WriteByte('\\')
			}
			cur.WriteByte(s[i])
			in = true
		case quote == '"':
			if c == '"' {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '"' || c == '\'':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}

// substitute expands $X, ${X}, ${X:-default} and ${X:+alt}; \$ is a literal $.
// An unset variable expands to "". Other ${X...} operators are refused.
func substitute(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) && (s[i+1] == '$' || s[i+1] == '\\') {
			b.WriteByte(s[i+1])
			i++
			continue
		}
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		if s[i+1] == '{' {
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated ${ in %q", s)
			}
			expr := s[i+2 : i+2+end]
			i += 2 + end
			name, op, word := expr, "", ""
			if k := strings.Index(expr, ":"); k >= 0 {
				name, op = expr[:k], expr[k:]
				if len(op) < 2 || (op[1] != '-' && op[1] != '+') {
					return "", fmt.Errorf("${%s}: only ${X}, ${X:-default} and ${X:+alternative} are supported", expr)
				}
				op, word = op[:2], op[2:]
			}
			if !validName(name) {
				return "", fmt.Errorf("${%s}: %q is not a variable name", expr, name)
			}
			v, ok := lookup(name)
			set := ok && v != ""
			switch op {
			case ":-":
				if !set {
					v = word
				}
			case ":+":
				if set {
					v = word
				} else {
					v = ""
				}
			}
			b.WriteString(v)
			continue
		}
		j := i + 1
		for j < len(s) && isNameByte(s[j]) && !(j == i+1 && s[j] >= '0' && s[j] <= '9') {
			j++
		}
		if j == i+1 {
			b.WriteByte(c)
			continue
		}
		v, _ := lookup(s[i+1 : j])
		b.WriteString(v)
		i = j - 1
	}
	return b.String(), nil
}
