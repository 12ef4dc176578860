// Command space is SPACE's one host binary: the CLI verbs (sandbox, exec, files,
// …) and the long-running services (server, node, node-manager, host-bridge),
// plus ns-init, the first process of an `ns` sandbox.
package main

import (
	"os"

	"github.com/spacesandbox/space/internal/cli"
	"github.com/spacesandbox/space/internal/driver/ns"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == ns.InitVerb {
		ns.InitMain() // never returns
	}
	extra := map[string]func([]string) int{
		"server":       runServer,
		"node":         runNode,
		"node-manager": runNodeManager,
		"host-bridge":  runHostBridge,
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, extra))
}
