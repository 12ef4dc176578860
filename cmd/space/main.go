// Command space is SPACE's host binary for users and the unprivileged
// services: the CLI verbs (sandbox, exec, files, …), the control plane
// (server) and the sandbox manager (node). The node's root process and the
// per-execution bridge are their own binaries, space-node-manager and
// space-host-bridge (beside this one); `space node-manager` and `space
// host-bridge` run them.
package main

import (
	"os"

	"github.com/spacesandbox/space/internal/cli"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/hostbin"
)

func main() {
	extra := map[string]func([]string) int{
		"server":       withFailpoints(runServer),
		"node":         withFailpoints(runNode),
		"node-manager": launcher(hostbin.NodeManager),
		"host-bridge":  launcher(hostbin.HostBridge),
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, extra))
}

// launcher returns a verb that replaces this process with the host binary
// name beside it, run with the verb's arguments.
func launcher(name string) func([]string) int {
	return func(args []string) int {
		err := hostbin.Exec(name, args)
		os.Stderr.WriteString("space: " + err.Error() + "\n")
		return 1
	}
}

// withFailpoints arms the failpoints SPACE_FAILPOINTS names before the
// service verb runs (internal/failpoint); a name no point has stops it, so a
// test's typo cannot silently disarm the crash it wants.
func withFailpoints(run func([]string) int) func([]string) int {
	return func(args []string) int {
		if err := failpoint.FromEnvironment(); err != nil {
			os.Stderr.WriteString("space: " + err.Error() + "\n")
			return 2
		}
		return run(args)
	}
}
