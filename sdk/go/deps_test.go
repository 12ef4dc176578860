package space

import (
	"go/version"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sdkModule is this module's path; apiModule the one module of this tree it
// may require.
const (
	sdkModule = "github.com/spacesandbox/space/sdk/go"
	apiModule = "github.com/spacesandbox/space/api"
)

// bannedPrefixes are the server's heavy dependencies, none of which a
// program using the SDK may link or even download: gVisor, Kubernetes
// types, the database drivers, the object-store client, and the server's
// own module.
var bannedPrefixes = []string{
	"gvisor.dev/",
	"k8s.io/",
	"sigs.k8s.io/",
	"github.com/jackc/",
	"modernc.org/",
	"github.com/minio/",
	"github.com/vishvananda/",
	"github.com/spacesandbox/space/internal/",
	"github.com/spacesandbox/space/cmd/",
}

// goList runs go list with args in this module and returns its output's fields.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v: %s", strings.Join(args, " "), err, msg)
	}
	return strings.Fields(string(out))
}

// TestDeps keeps the SDK's package closure small: of this tree it imports
// only api/sandbox/v1, and none of the server's heavy dependencies.
func TestDeps(t *testing.T) {
	deps := goList(t, "-deps", "-test", "-f", "{{.ImportPath}}", ".")
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %v", len(deps), deps)
	}
	for _, dep := range deps {
		dep, _, _ = strings.Cut(dep, " ") // "p [q.test]" variants
		for _, banned := range bannedPrefixes {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("the SDK imports %s (banned: %s...)", dep, banned)
			}
		}
		if rel, ok := strings.CutPrefix(dep, "github.com/spacesandbox/space/"); ok &&
			!strings.HasPrefix(rel, "sdk/go") && rel != "api/sandbox/v1" {
			t.Errorf("the SDK imports %s; of this tree only api/sandbox/v1 is allowed", dep)
		}
	}
}

// TestModuleGraph: a program requiring the SDK downloads none of the
// server's heavy modules, since none is in the SDK's module graph, and
// every module in it declares a go line no newer than the SDK's.
func TestModuleGraph(t *testing.T) {
	mods := goList(t, "-m", "-f", "{{.Path}}@{{.GoVersion}}", "all")
	ours := ""
	for _, m := range mods {
		if path, gov, _ := strings.Cut(m, "@"); path == sdkModule {
			ours = gov
		}
	}
	if ours == "" {
		t.Fatalf("go list -m all does not list %s: %v", sdkModule, mods)
	}
	for _, m := range mods {
		path, gov, _ := strings.Cut(m, "@")
		for _, banned := range bannedPrefixes {
			if strings.HasPrefix(path+"/", banned) {
				t.Errorf("the SDK's module graph has %s (banned: %s...)", path, banned)
			}
		}
		if strings.HasPrefix(path, "github.com/spacesandbox/space") && path != sdkModule && path != apiModule {
			t.Errorf("the SDK's module graph has %s; of this tree only %s is allowed", path, apiModule)
		}
		if gov != "" && version.Compare("go"+gov, "go"+ours) > 0 {
			t.Errorf("%s declares go %s, newer than the SDK's go %s: a program on go %s could not build it", path, gov, ours, ours)
		}
	}
}

// TestOlderGoThanServer: the SDK's go line is older than the server's (the
// root go.mod), so a program on an older Go can use it. The compiler holds
// the SDK's files to the language of its go line, and `go vet`'s stdversion
// check to the standard library of it (`make vet` runs it in this module).
func TestOlderGoThanServer(t *testing.T) {
	sdk := goVersionLine(t, "go.mod")
	server := goVersionLine(t, filepath.Join("..", "..", "go.mod"))
	if version.Compare("go"+sdk, "go"+server) >= 0 {
		t.Errorf("sdk/go declares go %s, not older than the server's go %s", sdk, server)
	}
	if api := goVersionLine(t, filepath.Join("..", "..", "api", "go.mod")); version.Compare("go"+api, "go"+sdk) > 0 {
		t.Errorf("api declares go %s, newer than the SDK's go %s", api, sdk)
	}
}

// goVersionLine returns the version of the go directive of the go.mod at path.
func goVersionLine(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s has no go directive", path)
	return ""
}
