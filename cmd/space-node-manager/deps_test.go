package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/spacesandbox/space/"

// banned are the packages (by prefix) the node's only root process must not
// link: the control plane's database drivers, the object-store clients,
// gVisor (the gateway's network stack), WebSocket, the HTTP API server and
// the E2B code in it, the CLI and SDK, and the unprivileged sandbox manager
// with its credentials and KMS. Whatever they map into memory and run at
// init would run as root.
var banned = []string{
	"github.com/jackc/", "modernc.org/sqlite", "github.com/minio/", "gvisor.dev/", "github.com/coder/websocket",
	module + "internal/server", module + "internal/store", module + "internal/objstore",
	module + "internal/gateway", module + "internal/cli", module + "sdk/", module + "api/sandbox",
	module + "internal/node", module + "internal/reconcile", module + "internal/scheduler",
	module + "internal/kms", module + "internal/credentials", module + "internal/apikey",
	module + "internal/bridge",
}

// TestDeps keeps the node-manager small: none of banned.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b) && (strings.HasSuffix(b, "/") || strings.HasPrefix(dep, b+"/")) {
				t.Errorf("space-node-manager imports %s (banned: %s)", dep, b)
			}
		}
	}
}
