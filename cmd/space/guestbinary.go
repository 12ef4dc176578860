package main

import (
	"github.com/spacesandbox/space/internal/guestbin"
	"github.com/spacesandbox/space/internal/hostbin"
)

// defaultGuestBinary is the space-guest beside this binary, where `make
// build` puts it and where the node-manager looks without --guest-binary.
func defaultGuestBinary() (string, error) { return hostbin.Beside(hostbin.Guest) }

// checkGuestBinary refuses a guest binary no sandbox could run (dynamically
// linked, another architecture, not an executable): every create would fail
// with "exec /.space/space-guest: no such file or directory".
func checkGuestBinary(path string) error {
	return guestbin.Check(path)
}
