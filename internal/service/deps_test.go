package service

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/spacesandbox/space/"

// adapters are the control plane's surfaces over this package: each may
// import the service, none another adapter, and the service none of them.
var adapters = []string{"internal/server", "internal/e2bapi", "internal/restapi", "internal/ingress"}

// TestDeps keeps the control plane's layers apart (docs/design/architecture.md):
// the operations import no HTTP at all and no adapter, and no adapter
// imports another (the wiring in internal/server composes them).
func TestDeps(t *testing.T) {
	tests := []struct {
		pkg string
		// banned are import paths (a trailing "/" bans a tree) the
		// package must not depend on.
		banned []string
	}{
		{"internal/service", append([]string{"net/http"}, adapters...)},
		{"internal/e2bapi", others("internal/e2bapi")},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			for _, dep := range deps(t, tt.pkg) {
				for _, b := range tt.banned {
					if strings.TrimPrefix(dep, module) == b || strings.HasPrefix(strings.TrimPrefix(dep, module), b+"/") {
						t.Errorf("%s imports %s (banned: %s)", tt.pkg, dep, b)
					}
				}
			}
		})
	}
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

// deps lists what package pkg (a path under the module) depends on,
// itself excluded.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var list []string
	for _, dep := range strings.Fields(string(out)) {
		if dep != module+pkg {
			list = append(list, dep)
		}
	}
	return list
}
