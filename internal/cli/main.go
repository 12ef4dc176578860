// Package cli implements the client verbs of the `space` command (sandbox, exec,
// shell, files, template, tenant, key, snapshot, port) over the Go SDK, with the
// contract of SPEC.md: SPACE_API_URL and SPACE_API_KEY (else DATA/admin.key),
// `-o json`, and exit codes 0 on success, 1 on error, 2 on bad usage. The host
// binary registers its server-side verbs (server, node, bench, …) as extra verbs.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
)

// Exit codes of the CLI (SPEC.md).
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// command is one verb or sub-verb of the CLI.
type command struct {
	path    string // "sandbox create", "exec"
	args    string // the rest of the usage line
	summary string
	// ownSignals marks commands that handle SIGINT and SIGTERM themselves
	// (forwarding them to a remote command) instead of being cancelled by them.
	ownSignals bool
	run        func(ctx context.Context, e *env, args []string) error
}

// commands lists every client command; filled by the files of this package.
var commands []*command

// Main runs the CLI on args (without the program name) and returns the exit code.
// extra holds the verbs of the host binary (server, node, …), each run with the
// arguments after its name; it may be nil.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer, extra map[string]func(args []string) int) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		w, code := stderr, ExitUsage
		if len(args) > 0 {
			w, code = stdout, ExitOK
		}
		printUsage(w, "", extra)
		return code
	}
	if run, ok := extra[args[0]]; ok {
		return run(args[1:])
	}
	cmd, rest := lookup(args)
	if cmd == nil {
		if isGroup(args[0]) {
			fmt.Fprintf(stderr, "space: %s: missing or unknown subcommand\n", args[0])
		} else {
			fmt.Fprintf(stderr, "space: unknown command %q\n", args[0])
		}
		printUsage(stderr, args[0], extra)
		return ExitUsage
	}
	e := newEnv(stdin, stdout, stderr)
	ctx := context.Background()
	if !cmd.ownSignals {
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
	}
	return e.report(cmd, cmd.run(ctx, e, rest))
}

// lookup finds the command named by the first one or two words of args.
func lookup(args []string) (*command, []string) {
	if len(args) >= 2 {
		for _, c := range commands {
			if c.path == args[0]+" "+args[1] {
				return c, args[2:]
			}
		}
	}
	for _, c := range commands {
		if c.path == args[0] {
			return c, args[1:]
		}
	}
	return nil, nil
}

// printUsage lists the commands, those of one group when group is set.
func printUsage(w io.Writer, group string, extra map[string]func([]string) int) {
	fmt.Fprintln(w, "usage: space COMMAND [ARGS]")
	fmt.Fprintln(w, "\ncommands:")
	shown := 0
	for _, c := range sortedCommands() {
		if group != "" && strings.Fields(c.path)[0] != group {
			continue
		}
		fmt.Fprintf(w, "  space %s %s\n      %s\n", c.path, c.args, c.summary)
		shown++
	}
	if shown == 0 {
		printUsage(w, "", extra)
		return
	}
	if group == "" && len(extra) > 0 {
		names := make([]string, 0, len(extra))
		for n := range extra {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(w, "\nalso: %s (see space VERB -h)\n", strings.Join(names, ", "))
	}
	fmt.Fprintln(w, "\nenvironment: SPACE_API_URL (default http://127.0.0.1:7070), SPACE_API_KEY (default: the file DATA/admin.key)")
}

// groupOrder is the order in which usage lists the commands.
var groupOrder = []string{"sandbox", "exec", "shell", "files", "snapshot", "port", "template", "tenant", "key", "signing-key", "nodes"}

// sortedCommands returns the commands in usage order.
func sortedCommands() []*command {
	rank := func(c *command) int {
		g := strings.Fields(c.path)[0]
		for i, name := range groupOrder {
			if name == g {
				return i
			}
		}
		return len(groupOrder)
	}
	out := slices.Clone(commands)
	slices.SortStableFunc(out, func(a, b *command) int { return rank(a) - rank(b) })
	return out
}

// isGroup reports whether name is the first word of a multi-word command.
func isGroup(name string) bool {
	for _, c := range commands {
		if strings.HasPrefix(c.path, name+" ") {
			return true
		}
	}
	return false
}

// usageError is bad usage of a command: exit code 2 and the command's usage.
type usageError struct {
	fs  *flag.FlagSet // nil when the command has no flags
	msg string
	err error // flag.ErrHelp for -h, else nil
}

// Error returns the message.
func (u *usageError) Error() string { return u.msg }

// Unwrap returns the cause, so errors.Is(err, flag.ErrHelp) sees -h.
func (u *usageError) Unwrap() error { return u.err }

// usagef returns a usageError.
func usagef(fs *flag.FlagSet, format string, a ...any) error {
	return &usageError{fs: fs, msg: fmt.Sprintf(format, a...)}
}

// exitCode is a command's outcome that is neither success nor a CLI error: the
// exit code of a remote command, passed through.
type exitCode int

// Error describes the code.
func (c exitCode) Error() string { return fmt.Sprintf("exit code %d", int(c)) }

// report prints err the way SPEC.md wants and returns the exit code.
func (e *env) report(cmd *command, err error) int {
	var ue *usageError
	var code exitCode
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		e.printCommandUsage(e.stdout, cmd, err)
		return ExitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "space: %s\n", printable(ue.msg))
		e.printCommandUsage(e.stderr, cmd, err)
		return ExitUsage
	}
	fmt.Fprintf(e.stderr, "space: %s\n", e.message(err))
	return ExitError
}

// printCommandUsage prints one command's usage line and flags.
func (e *env) printCommandUsage(w io.Writer, cmd *command, err error) {
	fmt.Fprintf(w, "usage: space %s %s\n  %s\n", cmd.path, cmd.args, cmd.summary)
	var ue *usageError
	if errors.As(err, &ue) && ue.fs != nil {
		ue.fs.SetOutput(w)
		ue.fs.PrintDefaults()
	}
}
