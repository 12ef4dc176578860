// Package reexec is how a SPACE binary runs a helper of its own in a new
// process: it starts /proc/self/exe (the file it runs, whatever happens to
// its path) with the helper's name as argv[0], and the binary's main hands
// over to the helper before anything else (Run). The ns runtime's first
// sandbox process (ns-init) and the vm runtime's jail helper are helpers
// of space-node-manager.
package reexec

import (
	"os"
	"os/exec"
)

// Self is the path a helper is started from: the running binary's file.
const Self = "/proc/self/exe"

// Helpers maps a helper's name (its argv[0]) to its entry point, which
// receives the rest of argv and must not return: it ends by exec or exit.
type Helpers map[string]func(args []string)

// Command returns a command that runs this binary's helper name with args.
// The caller sets the rest (directory, files, SysProcAttr).
func Command(name string, args ...string) *exec.Cmd {
	return &exec.Cmd{Path: Self, Args: append([]string{name}, args...)}
}

// Run runs the helper argv[0] names, if any, and does not return then; it
// returns at once when argv[0] names none. A binary calls it first in main
// (a test binary in TestMain).
func Run(helpers Helpers) {
	h, ok := helpers[os.Args[0]]
	if !ok {
		return
	}
	h(os.Args[1:])
	// A helper ends by exec or exit; one that returns has failed.
	os.Stderr.WriteString(os.Args[0] + ": helper returned\n")
	os.Exit(126)
}
