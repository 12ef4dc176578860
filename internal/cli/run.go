package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"
)

func init() {
	commands = append(commands,
		&command{path: "run", args: "[--sandbox ID | --template T] [--lang python|bash] [--context C] [--env K=V]… [--timeout D] CODE|-",
			summary: "run code in a sandbox's code interpreter (code-interpreter template), printing its output and results; exits 1 on an error; without --sandbox, in a new sandbox deleted after",
			run:     runCode},
	)
}

func runCode(ctx context.Context, e *env, args []string) error {
	fs := newFlags("run")
	env := kvFlag{}
	var opts space.RunCodeOptions
	id := fs.String("sandbox", "", "sandbox to run in (default: a new one, deleted after)")
	tmpl := fs.String("template", "code-interpreter", "template of the new sandbox")
	runtime := fs.String("runtime", "", "runtime of the new sandbox: vm or ns (default: the server's)")
	fs.StringVar(&opts.Language, "lang", "", "language: python (default) or bash")
	fs.StringVar(&opts.Language, "language", "", "same as --lang")
	fs.StringVar(&opts.Context, "context", "", "code interpreter context id (space's REST …/code/contexts)")
	fs.Var(env, "env", "environment variable K=V for this run (repeatable)")
	fs.DurationVar(&opts.Timeout, "timeout", 0, "interrupt the code after this long (default 60s)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "CODE"); err != nil {
		return err
	}
	if opts.Timeout < 0 {
		return usagef(fs, "--timeout %s: want a positive duration", opts.Timeout)
	}
	code := pos[0]
	if code == "-" {
		b, err := io.ReadAll(e.stdin)
		if err != nil {
			return fmt.Errorf("read the code from stdin: %w", err)
		}
		code = string(b)
	}
	if len(env) > 0 {
		opts.Env = env
	}
	templateSet := false
	fs.Visit(func(f *flag.Flag) { templateSet = templateSet || f.Name == "template" || f.Name == "runtime" })
	if *id != "" && templateSet {
		return usagef(fs, "give --sandbox or --template/--runtime (of a new sandbox), not both")
	}
	sandbox := *id
	if sandbox == "" {
		sb, err := e.codeSandbox(ctx, *tmpl, *runtime)
		if err != nil {
			return err
		}
		sandbox = sb
		defer func() {
			// Deleted even when ctx was cancelled (Ctrl-C).
			dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.c.DeleteSandbox(dctx, sandbox); err != nil {
				fmt.Fprintf(e.stderr, "space: warning: delete sandbox %s: %v\n", sandbox, err)
			}
		}()
	}
	opts.OnStdout = func(s string) { fmt.Fprint(e.stdout, s) }
	opts.OnStderr = func(s string) { fmt.Fprint(e.stderr, s) }
	opts.OnResult = func(r sandboxv1.CodeResult) {
		if r.Text != "" {
			fmt.Fprintln(e.stdout, r.Text)
			return
		}
		fmt.Fprintf(e.stderr, "[result: %s]\n", strings.Join(resultFormats(r), ", "))
	}
	ex, err := e.c.RunCode(ctx, sandbox, code, opts)
	if err != nil {
		return err
	}
	if ex.Error != nil {
		if ex.Error.Traceback != "" {
			fmt.Fprintln(e.stderr, ex.Error.Traceback)
		}
		fmt.Fprintf(e.stderr, "%s: %s\n", ex.Error.Name, ex.Error.Value)
		return exitCode(ExitError)
	}
	return nil
}

// codeSandbox creates a sandbox of template for space run and waits until
// it runs (its code interpreter listens then).
func (e *env) codeSandbox(ctx context.Context, template, runtime string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	sb, err := e.c.CreateSandbox(cctx, sandboxv1.CreateSandboxRequest{Template: template, Runtime: runtime})
	if err != nil {
		return "", err
	}
	if sb.State != sandboxv1.StateRunning {
		if _, err := e.c.WaitForState(cctx, sb.ID, sandboxv1.StateRunning); err != nil {
			dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
			defer dcancel()
			_ = e.c.DeleteSandbox(dctx, sb.ID)
			return "", err
		}
	}
	return sb.ID, nil
}

// resultFormats names the formats of a result without text.
func resultFormats(r sandboxv1.CodeResult) []string {
	var out []string
	for _, f := range []struct {
		name string
		v    string
	}{{"html", r.HTML}, {"markdown", r.Markdown}, {"svg", r.SVG}, {"png", r.PNG}, {"jpeg", r.JPEG}, {"pdf", r.PDF}, {"latex", r.LaTeX}, {"javascript", r.JavaScript}} {
		if f.v != "" {
			out = append(out, fmt.Sprintf("%s, %d bytes", f.name, len(f.v)))
		}
	}
	if len(r.JSON) > 0 {
		out = append(out, "json")
	}
	for k := range r.Extra {
		out = append(out, k)
	}
	if len(out) == 0 {
		out = append(out, "empty")
	}
	return out
}
