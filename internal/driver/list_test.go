package driver

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestListStateDirs lists the execution directories of a state directory:
// sorted, and without files or names no execution can have.
func TestListStateDirs(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"exec-b", "exec-a", "Not-An-Id", "has.dot"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "exec-file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := ListStateDirs(dir)
	if want := []string{"exec-a", "exec-b"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ListStateDirs = %v, %v; want %v", got, err, want)
	}
	if got, err := ListStateDirs(filepath.Join(dir, "missing")); err != nil || len(got) != 0 {
		t.Errorf("ListStateDirs of a missing directory = %v, %v; want none", got, err)
	}
}
