package main

import (
	"os"
	"path/filepath"

	"github.com/spacesandbox/space/internal/guestbin"
)

// defaultGuestBinary is the space-guest beside this binary, where `make
// build` puts it and where the node-manager looks without --guest-binary.
func defaultGuestBinary() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(self), "space-guest"), nil
}

// checkGuestBinary refuses a guest binary no sandbox could run (dynamically
// linked, another architecture, not an executable): every create would fail
// with "exec /.space/space-guest: no such file or directory".
func checkGuestBinary(path string) error {
	return guestbin.Check(path)
}
