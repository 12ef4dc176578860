package service

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/spacesandbox/space/"

// adapters are the control plane's surfaces over this package: each may
// import the service, none another adapter, and the service none of them.
var adapters = []string{"internal/server", "internal/restapi", "internal/e2bapi", "internal/ingress", "internal/nodefacing"}

// TestDeps keeps the control plane's layers apart (docs/design/architecture.md):
// the operations import no adapter and do no HTTP themselves (net/http may
// come in below them: internal/credentials checks header names with it),
// and no adapter imports another (the wiring in internal/server composes
// them): restapi none of e2bapi, ingress and nodefacing, and none of those
// restapi.
func TestDeps(t *testing.T) {
	tests := []struct {
		pkg string
		// banned are the packages (and their trees) pkg must not depend
		// on; bannedDirect those it must not import itself.
		banned, bannedDirect []string
	}{
		{"internal/service", adapters, []string{"net/http"}},
		{"internal/restapi", others("internal/restapi"), nil},
		{"internal/e2bapi", others("internal/e2bapi"), nil},
		{"internal/ingress", others("internal/ingress"), nil},
		{"internal/nodefacing", others("internal/nodefacing"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			for _, dep := range list(t, "{{join .Deps \"\\n\"}}", tt.pkg) {
				if b := match(dep, tt.banned); b != "" {
					t.Errorf("%s depends on %s (banned: %s)", tt.pkg, dep, b)
				}
			}
			for _, imp := range list(t, "{{join .Imports \"\\n\"}}", tt.pkg) {
				if b := match(imp, tt.bannedDirect); b != "" {
					t.Errorf("%s imports %s (banned: %s)", tt.pkg, imp, b)
				}
			}
		})
	}
}

// match returns the entry of banned that path is or is under, or "".
// Entries are standard-library paths or paths under the module.
func match(path string, banned []string) string {
	rel := strings.TrimPrefix(path, module)
	for _, b := range banned {
		if rel == b || strings.HasPrefix(rel, b+"/") {
			return b
		}
	}
	return ""
}

// others is every adapter but pkg.
func others(pkg string) []string {
	var out []string
	for _, a := range adapters {
		if a != pkg {
			out = append(out, a)
		}
	}
	return out
}

// list runs go list -f format on package pkg (a path under the module).
func list(t *testing.T, format, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", format, module+pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}
