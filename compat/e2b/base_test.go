package e2b_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/template"
	"github.com/spacesandbox/space/internal/testenv/devserver"
)

// TestE2BBaseTemplate builds a template from the base template's recipe
// (debootstrap of template.BaseSuite with template.BasePackages: minutes
// and a Debian mirror, so SPACE_TEST_BASE_TEMPLATE=1 runs it) and runs
// base.mjs on it with the published SDK: python, user, and sudo as each
// runtime has it (SPACE_TEST_BASE_RUNTIMES, default ns).
func TestE2BBaseTemplate(t *testing.T) {
	if os.Getenv("SPACE_TEST_BASE_TEMPLATE") != "1" {
		t.Skip("SPACE_TEST_BASE_TEMPLATE=1 builds the base template (debootstrap, minutes)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the all-in-one server starts the root node-manager; run as root (CI does)")
	}
	modules := installSDK(t)
	work := t.TempDir()
	for _, name := range []string{"lib.mjs", "package.json", "base.mjs"} {
		copyFile(t, name, filepath.Join(work, name))
	}
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	bin := devserver.Build(t)
	runtimes := strings.Fields(os.Getenv("SPACE_TEST_BASE_RUNTIMES"))
	if len(runtimes) == 0 {
		runtimes = []string{"ns"}
	}
	from := "debootstrap:" + template.BaseSuite + "+" + strings.Join(template.BasePackages, ",")
	for _, runtime := range runtimes {
		t.Run(runtime, func(t *testing.T) {
			srv := startServer(t, bin, runtime)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
			defer cancel()
			build := exec.CommandContext(ctx, filepath.Join(bin, "space"), "template", "build", "sudo-base", "--from", from)
			build.Env = append(os.Environ(), "SPACE_API_URL="+srv.URL, "SPACE_API_KEY="+srv.Key)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("space template build: %v\n%s", err, out)
			}
			cmd := exec.CommandContext(ctx, "node", "base.mjs")
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "E2B_API_URL="+srv.E2BAPI, "E2B_SANDBOX_URL="+srv.E2BSandbox, "E2B_API_KEY="+srv.Key,
				"E2B_TEMPLATE=sudo-base", "SPACE_RUNTIME="+runtime)
			out, err := cmd.CombinedOutput()
			t.Logf("node base.mjs:\n%s", out)
			if err != nil {
				t.Errorf("node base.mjs: %v\nserver log:\n%s", err, srv.Logs())
			}
		})
	}
}
