// Command space-node-manager is the node's only root process: it answers the
// privileged operations of the sandbox manager (`space node`) over a unix
// socket (internal/privop) and runs the sandboxes' runtimes (ns, vm). It
// links no database driver, object-store client, HTTP API server or E2B
// code (deps_test.go): only what a root process needs.
//
// It is also the binary of its own helpers (reexec): the first process of
// an ns sandbox and the vm runtime's jail helper.
package main

import (
	"os"

	"github.com/spacesandbox/space/internal/driver/ns"
	"github.com/spacesandbox/space/internal/driver/vm"
	"github.com/spacesandbox/space/internal/reexec"
)

func main() {
	reexec.Run(reexec.Helpers{ns.InitHelper: ns.InitMain, vm.JailHelper: vm.JailMain})
	os.Exit(runNodeManager(os.Args[1:]))
}
