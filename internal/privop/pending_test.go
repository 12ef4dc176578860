package privop

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spacesandbox/space/internal/driver"
)

// TestHelloPendingRuntimes: a runtime being set up is reported as pending
// (the control plane waits for it) until it joins or its setup fails, and
// never while it is offered.
func TestHelloPendingRuntimes(t *testing.T) {
	dir := t.TempDir()
	guest := filepath.Join(dir, "space-guest")
	os.WriteFile(guest, []byte("#!/bin/true\n"), 0o755)
	drv := &pipeDriver{peers: map[string]*os.File{}}
	srv, err := NewServer(Config{
		Socket: filepath.Join(dir, "nm.sock"), GuestBinary: guest,
		Storage:     &memStorage{dir: dir, templates: map[string]bool{}, clones: map[string]bool{}, snaps: map[string]string{}},
		SnapshotDir: filepath.Join(dir, "snapshots"),
		Drivers:     map[string]driver.Driver{"ns": drv},
		Build:       func(context.Context, string, string, io.Writer) error { return nil },
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, runtimes, pending []string) {
		t.Helper()
		h := srv.hello()
		if !slices.Equal(h.Runtimes, runtimes) || !slices.Equal(h.Pending, pending) {
			t.Errorf("%s: runtimes %v pending %v, want %v and %v", what, h.Runtimes, h.Pending, runtimes, pending)
		}
	}
	check("at start", []string{"ns"}, nil)
	srv.ExpectDriver("vm")
	check("vm expected", []string{"ns"}, []string{"vm"})
	srv.AddDriver("vm", drv)
	check("vm joined", []string{"ns", "vm"}, nil)
	srv.ExpectDriver("vm")
	check("vm expected again while offered", []string{"ns", "vm"}, nil)
	srv.ExpectDriver("other")
	srv.DropDriver("other")
	check("setup failed", []string{"ns", "vm"}, nil)
}
