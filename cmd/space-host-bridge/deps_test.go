package main

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/spacesandbox/space/"

// allowed are the only packages of this module the host bridge may link
// (by prefix): the bridge, the guest protocol and its client, and what
// those stand on. One bridge runs per sandbox: what it links is density.
var allowed = []string{
	"internal/bridge", "internal/guest", "api/guest/", "internal/unixsock", "internal/hostbin",
	"internal/errdefs", "internal/capability", "internal/driver",
	// Its crash points (inert unless the node hands it SPACE_FAILPOINTS).
	"internal/failpoint",
	// The one table of HTTP answers and the wire types of its error body.
	"internal/apierr", "api/sandbox/v1", "api/node/v1",
	// The escaping of guest text it passes on (standard library only).
	"internal/guesttext",
}

// banned are outside packages it must not link either: the database
// drivers, the object-store client, gVisor, WebSocket.
var banned = []string{"github.com/jackc/", "modernc.org/sqlite", "github.com/minio/", "gvisor.dev/", "github.com/coder/websocket"}

// TestDeps keeps the host bridge small: of this module only allowed, and
// none of banned (so neither the HTTP API server, the E2B code, the
// node-manager's privileged server nor the runtimes).
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range banned {
			if strings.HasPrefix(dep, b) {
				t.Errorf("space-host-bridge imports %s (banned: %s)", dep, b)
			}
		}
		rel, ok := strings.CutPrefix(dep, module)
		if !ok || rel == "cmd/space-host-bridge" {
			continue
		}
		if !allowedPath(rel) {
			t.Errorf("space-host-bridge imports %s; of this module only %v are allowed", dep, allowed)
		}
	}
}

func allowedPath(rel string) bool {
	for _, a := range allowed {
		if rel == a || strings.HasPrefix(rel, strings.TrimSuffix(a, "/")+"/") {
			return true
		}
	}
	return false
}
