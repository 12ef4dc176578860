package nodemanager

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestHelloRuntimeStatus: the status line of a runtime is reported until
// removed, cut to its bound, and Hello's map is a copy.
func TestHelloRuntimeStatus(t *testing.T) {
	srv := &Server{drivers: map[string]driver.Driver{}, cfg: Config{Storage: &memStorage{}}}
	if h := srv.hello(); h.Status != nil {
		t.Errorf("no status set: %v", h.Status)
	}
	srv.SetRuntimeStatus("vm", "q35 (Debian's cloud kernel); minimal kernel: compile: 10 objects")
	h := srv.hello()
	if h.Status["vm"] != "q35 (Debian's cloud kernel); minimal kernel: compile: 10 objects" {
		t.Errorf("status %v", h.Status)
	}
	h.Status["vm"] = "changed"
	if srv.hello().Status["vm"] == "changed" {
		t.Error("Hello's status map is the server's own")
	}
	srv.SetRuntimeStatus("vm", strings.Repeat("x", 1000))
	if got := len(srv.hello().Status["vm"]); got != maxStatusLine {
		t.Errorf("a 1000-byte line reported as %d bytes, want %d", got, maxStatusLine)
	}
	srv.SetRuntimeStatus("vm", "")
	if h := srv.hello(); h.Status != nil {
		t.Errorf("after removal: %v", h.Status)
	}
}
