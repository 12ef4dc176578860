package hostbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck refuses a missing binary, a directory and a file that is not
// executable, naming `make build` and the package to build; it accepts an
// executable file.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "space-host-bridge")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "space-node-manager"), dir, plain} {
		err := Check(path)
		if err == nil || !strings.Contains(err.Error(), "make build") || !strings.Contains(err.Error(), "./cmd/"+filepath.Base(path)) {
			t.Errorf("Check(%s) = %v; want a refusal naming make build", path, err)
		}
	}
	if err := os.Chmod(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Check(plain); err != nil {
		t.Errorf("Check(an executable) = %v", err)
	}
}
