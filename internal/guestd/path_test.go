package guestd

import (
	"testing"

	"github.com/spacesandbox/space/internal/template"
)

// TestDefaultPathIsLinted: the PATH the daemon gives root's processes is
// the one template builds check for writable directories (catalogue A-8);
// a directory added here unchecked there would be a hole.
func TestDefaultPathIsLinted(t *testing.T) {
	if defaultPath != template.GuestRootPATH {
		t.Errorf("guestd's default PATH %q is not template.GuestRootPATH %q, which image builds lint", defaultPath, template.GuestRootPATH)
	}
}
