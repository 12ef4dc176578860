package nodemanager

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
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

// TestStartWaitsForARuntimeBeingSetUp: a start for a runtime still being
// set up (pending in Hello, so the control plane places there) is
// Unavailable — retried — not InvalidArgument, which fails the sandbox
// for good (a restore right after a node restart, before its vm runtime
// is back); a runtime the node will never have stays InvalidArgument.
func TestStartWaitsForARuntimeBeingSetUp(t *testing.T) {
	srv := &Server{drivers: map[string]driver.Driver{"ns": &pipeDriver{peers: map[string]*os.File{}}}, cfg: Config{Storage: &memStorage{}}}
	args := func(runtime string) *privop.StartArgs {
		return &privop.StartArgs{ExecID: "sbx1-g1-abcdefgh", SandboxID: "sbx1", Template: "minimal", Runtime: runtime, CPUs: 1, MemoryMiB: 256, PidsMax: 64}
	}
	srv.ExpectDriver("vm")
	if _, _, err := srv.start(context.Background(), args("vm")); !errdefs.IsUnavailable(err) {
		t.Errorf("start on vm while it is set up: %v, want Unavailable", err)
	}
	srv.DropDriver("vm")
	if _, _, err := srv.start(context.Background(), args("vm")); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "not available") {
		t.Errorf("start on vm after its setup failed: %v, want InvalidArgument", err)
	}
}
