package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"
)

func init() {
	commands = append(commands,
		&command{path: "credential create", args: "--name N --host H [--host H2]… (--header NAME | --basic | --query NAME) [--expires DUR|RFC3339] [--rate-limit N] [--sandbox ID] [--project P] [-o json] < secret",
			summary: "store a credential the gateway injects into requests to its hosts; the secret is read from stdin and never enters a sandbox; prints its id", run: credentialCreate},
		&command{path: "credential list", args: "[-o json]", summary: "list credentials (never their secrets)", run: credentialList},
		&command{path: "credential delete", args: "ID", summary: "delete a credential", run: credentialDelete},
		&command{path: "credential audit", args: "[--sandbox ID] [--credential ID] [--limit N] [-o json]",
			summary: "show who used which credential for which host, newest first", run: credentialAudit},
	)
}

// maxSecretInput bounds the secret read from stdin (the server's limit is
// 64 KiB).
const maxSecretInput = 64 << 10

// listFlag is a repeatable string flag.
type listFlag struct{ v *[]string }

func (l listFlag) String() string {
	if l.v == nil {
		return ""
	}
	return strings.Join(*l.v, ",")
}

func (l listFlag) Set(s string) error {
	*l.v = append(*l.v, s)
	return nil
}

// credentialCreate reads the secret from stdin, never from the command
// line: arguments are visible to every user of the machine in ps and
// /proc/PID/cmdline, and land in shell history.
func credentialCreate(ctx context.Context, e *env, args []string) error {
	fs := newFlags("credential create")
	var req sandboxv1.CreateCredentialRequest
	fs.StringVar(&req.Name, "name", "", "label of the credential (required)")
	fs.Var(listFlag{&req.AllowedHosts}, "host", "host the secret may be sent to: exact, IP address, or *.domain (required, repeatable)")
	header := fs.String("header", "", "inject the secret as this HTTP header, e.g. Authorization (give the whole value, \"Bearer …\")")
	basic := fs.Bool("basic", false, "inject as HTTP basic authentication; the secret is user:password")
	query := fs.String("query", "", "inject the secret as this URL query parameter")
	expires := fs.String("expires", "", "stop injecting after this duration (e.g. 720h) or at this RFC 3339 time")
	fs.IntVar(&req.RateLimit, "rate-limit", 0, "most injections per minute (default: unlimited)")
	fs.StringVar(&req.Sandbox, "sandbox", "", "only for this sandbox")
	fs.StringVar(&req.Project, "project", "", "only for the sandboxes of this project")
	fs.StringVar(&req.Tenant, "tenant", "", "tenant of the credential (admin key; default: the caller's)")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 0); err != nil {
		return err
	}
	if req.Name == "" {
		return usagef(fs, "missing --name")
	}
	if len(req.AllowedHosts) == 0 {
		return usagef(fs, "missing --host: say where the secret may be sent")
	}
	if req.Injection, err = injectionOf(*header, *basic, *query); err != nil {
		return usagef(fs, "%v", err)
	}
	if req.RateLimit < 0 {
		return usagef(fs, "--rate-limit must not be negative")
	}
	if *expires != "" {
		t, err := parseExpiry(*expires, time.Now())
		if err != nil {
			return usagef(fs, "--expires %q: %v", *expires, err)
		}
		req.ExpiresAt = &t
	}
	secret, err := readSecret(e)
	if err != nil {
		return err
	}
	req.Secret = secret
	c, err := e.c.CreateCredential(ctx, req)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, c)
	}
	return writeLine(e.stdout, c.ID)
}

// injectionOf turns the exclusive --header, --basic and --query flags into
// an injection.
func injectionOf(header string, basic bool, query string) (sandboxv1.CredentialInjection, error) {
	var inj sandboxv1.CredentialInjection
	n := 0
	if header != "" {
		inj, n = sandboxv1.CredentialInjection{Method: "header", Name: header}, n+1
	}
	if basic {
		inj, n = sandboxv1.CredentialInjection{Method: "basic"}, n+1
	}
	if query != "" {
		inj, n = sandboxv1.CredentialInjection{Method: "query", Name: query}, n+1
	}
	if n != 1 {
		return inj, fmt.Errorf("give exactly one of --header NAME, --basic and --query NAME")
	}
	return inj, nil
}

// parseExpiry reads a positive duration from now, or an RFC 3339 time.
func parseExpiry(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("want a positive duration")
		}
		return now.Add(d).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want a duration such as 720h or an RFC 3339 time such as 2030-01-02T15:04:05Z")
	}
	return t, nil
}

// readSecret reads the secret from stdin: everything up to EOF, without
// one trailing newline (echo and heredocs add one).
func readSecret(e *env) (string, error) {
	if f, ok := e.stdin.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			fmt.Fprintln(e.stderr, "reading the secret from stdin; end it with Ctrl-D (it is echoed: prefer a pipe or a file)")
		}
	}
	b, err := io.ReadAll(io.LimitReader(e.stdin, maxSecretInput+2))
	if err != nil {
		return "", fmt.Errorf("read the secret from stdin: %w", err)
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	if len(b) > maxSecretInput {
		return "", fmt.Errorf("the secret on stdin is over %d bytes", maxSecretInput)
	}
	if len(b) == 0 {
		return "", fmt.Errorf("no secret on stdin: pipe it in, e.g. space credential create … < token.txt")
	}
	return string(b), nil
}

func credentialList(ctx context.Context, e *env, args []string) error {
	out, err := listFlags("credential list", args)
	if err != nil {
		return err
	}
	list, err := e.c.ListCredentials(ctx)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.CredentialList{Credentials: list})
	}
	rows := make([][]string, 0, len(list))
	for _, c := range list {
		scope := "tenant"
		switch {
		case c.Scope.Sandbox != "":
			scope = "sandbox " + c.Scope.Sandbox
		case c.Scope.Project != "":
			scope = "project " + c.Scope.Project
		}
		inj := c.Injection.Method
		if c.Injection.Name != "" {
			inj += " " + c.Injection.Name
		}
		expires, limit := "-", "-"
		if c.ExpiresAt != nil {
			expires = formatTime(*c.ExpiresAt)
		}
		if c.RateLimit > 0 {
			limit = strconv.Itoa(c.RateLimit) + "/min"
		}
		rows = append(rows, []string{c.ID, c.Name, scope, inj, strings.Join(c.AllowedHosts, ","), expires, limit})
	}
	return writeTable(e.stdout, []string{"ID", "NAME", "SCOPE", "INJECTION", "HOSTS", "EXPIRES", "RATE"}, rows)
}

func credentialDelete(ctx context.Context, e *env, args []string) error {
	fs := newFlags("credential delete")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "ID"); err != nil {
		return err
	}
	return e.c.DeleteCredential(ctx, pos[0])
}

func credentialAudit(ctx context.Context, e *env, args []string) error {
	fs := newFlags("credential audit")
	var q space.CredentialAuditQuery
	fs.StringVar(&q.Sandbox, "sandbox", "", "only this sandbox's accesses")
	fs.StringVar(&q.Credential, "credential", "", "only this credential's accesses")
	fs.IntVar(&q.Limit, "limit", 0, "at most this many entries (default 100, at most 1000)")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 0); err != nil {
		return err
	}
	if q.Limit < 0 || q.Limit > 1000 {
		return usagef(fs, "--limit %d: want 1 to 1000", q.Limit)
	}
	entries, err := e.c.CredentialAudit(ctx, q)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.CredentialAuditList{Entries: entries})
	}
	rows := make([][]string, 0, len(entries))
	for _, a := range entries {
		verdict, reason := "denied", a.Reason
		switch {
		case a.Kind == "redaction":
			verdict, reason = "redacted", fmt.Sprintf("%s (%s, %d×)", a.Reason, a.Where, a.Count)
		case a.Allowed:
			verdict = "allowed"
		}
		rows = append(rows, []string{formatTime(a.Time), a.Sandbox, a.ExecutionID, a.Host, a.CredentialID, verdict, reason})
	}
	return writeTable(e.stdout, []string{"TIME", "SANDBOX", "EXECUTION", "HOST", "CREDENTIAL", "RESULT", "REASON"}, rows)
}
