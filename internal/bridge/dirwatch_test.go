package bridge

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/guestd"
)

// TestBridgeStopsWhenItsDirectoryIsRemoved: a bridge whose execution
// directory is renamed keeps serving (a prepared execution is renamed when
// claimed); once the directory is removed it stops, and the guest daemon at
// the other end of the channel sees it close and returns.
func TestBridgeStopsWhenItsDirectoryIsRemoved(t *testing.T) {
	hostConn, guestConn := channelPair(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	guestDone := make(chan error, 1)
	go func() { guestDone <- guestd.Serve(ctx, guestConn, guestd.Config{}, log) }()

	root := t.TempDir()
	dir := filepath.Join(root, "exec-prepared")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The socket lives outside the directory so that removing the directory
	// is the only thing that changes.
	b, err := New(Config{ExecID: "e1", Socket: filepath.Join(root, "b.sock"), Channel: hostConn, Dir: dir, DirCheckEvery: 20 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- b.Run(ctx) }()

	claimed := filepath.Join(root, "exec-claimed")
	if err := os.Rename(dir, claimed); err != nil {
		t.Fatal(err)
	}
	// Many check periods pass after the rename; the bridge must still run.
	if err := b.client.Wait(ctx); err != nil {
		t.Fatalf("guest not ready through the bridge: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	select {
	case <-runDone:
		t.Fatalf("the bridge stopped after its directory was renamed (reason %q)", b.stopReason())
	default:
	}

	if err := os.RemoveAll(claimed); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-runDone:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the bridge kept running a minute after its execution directory was removed")
	}
	if r := b.stopReason(); !strings.Contains(r, "execution directory removed") {
		t.Errorf("stop reason %q, want execution directory removed", r)
	}
	select {
	case <-guestDone:
	case <-time.After(time.Minute):
		t.Fatal("the guest daemon kept serving a minute after the bridge stopped: the channel was not closed")
	}
}

func (b *Bridge) stopReason() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reason
}
