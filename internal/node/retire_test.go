package node

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/privop"
)

func newTestManager(t *testing.T, dir string) *Manager {
	t.Helper()
	m, err := NewManager(Config{NodeID: "node-a", DataDir: dir, Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true"},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	agreeClock(t, m)
	return m
}

func saveRecord(t *testing.T, m *Manager, rec *Record) {
	t.Helper()
	if err := os.MkdirAll(m.records.execDir(rec.ExecID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := m.records.save(rec); err != nil {
		t.Fatal(err)
	}
}

// TestRetirement: once the node learns that generation 8 serves the sandbox,
// a generation-7 capability is refused with RefreshRoute however fresh it
// is, its streams are cut, and the retirement survives a restart.
func TestRetirement(t *testing.T) {
	dir := t.TempDir()
	m := newTestManager(t, dir)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := capability.NewSigner("k1", priv)
	if err := m.SetKeys(capability.KeySetFor(1, signer)); err != nil {
		t.Fatal(err)
	}
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g7-x", SandboxID: "sb1", Generation: 7, ActivationID: "a-7", Runtime: "ns"}}
	saveRecord(t, m, rec)
	tok, _ := signer.Mint(capability.Identity{Sandbox: "sb1", Generation: 7, Node: "node-a", Substrate: "ns", Activation: "a-7"}, capability.OpExec, 0, "")
	header := capability.Encode(tok)
	if err := m.checkCapability(header, rec, capability.OpExec, time.Now()); err != nil {
		t.Fatalf("before retirement: %v", err)
	}
	stream, release, _ := m.streams.acquire(context.Background(), surfaceGuest, rec.ExecID)
	defer release()
	other, releaseOther, _ := m.streams.acquire(context.Background(), surfaceGuest, "sb2-g1-y")
	defer releaseOther()

	m.Retire([]nodev1.Retirement{
		{ExecID: rec.ExecID, SandboxID: "sb1", Generation: 8},
		{ExecID: "sb1-g7-x", SandboxID: "another"},     // names the wrong sandbox: ignored
		{ExecID: "../../etc", SandboxID: "sb1"},        // malformed: ignored
		{ExecID: "missing-g1-z", SandboxID: "missing"}, // unknown: ignored
	})
	select {
	case <-stream.Done():
		if cause := context.Cause(stream); !strings.Contains(cause.Error(), "retired") {
			t.Errorf("stream cut with %v, want the retirement as cause", cause)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stream of the retired execution was not cut")
	}
	if other.Err() != nil {
		t.Error("a stream of another execution was cut")
	}
	got, err := m.records.load(rec.ExecID)
	if err != nil || !got.Retired || got.RetiredBy != 8 {
		t.Fatalf("record after retirement: %+v, %v", got, err)
	}
	if err := m.checkCapability(header, got, capability.OpExec, time.Now()); !errors.Is(err, errRefreshRoute) {
		t.Errorf("unexpired generation-7 capability after retirement: %v, want RefreshRoute", err)
	}
	// A restarted node keeps refusing it.
	m2 := newTestManager(t, dir)
	got2, _ := m2.records.load(rec.ExecID)
	if err := m2.checkCapability(header, got2, capability.OpExec, time.Now()); !errors.Is(err, errRefreshRoute) {
		t.Errorf("after a restart: %v, want RefreshRoute", err)
	}
	// Retiring again keeps the first record.
	m.Retire([]nodev1.Retirement{{ExecID: rec.ExecID, SandboxID: "sb1", Generation: 9}})
	if got, _ := m.records.load(rec.ExecID); got.RetiredBy != 8 {
		t.Errorf("second retirement changed RetiredBy to %d", got.RetiredBy)
	}
}

// TestRetireOlder: installing generation 8 of a sandbox on the node retires
// its older executions there, and only those.
func TestRetireOlder(t *testing.T) {
	m := newTestManager(t, t.TempDir())
	for _, r := range []*Record{
		{StartExecution: nodev1.StartExecution{ExecID: "sb1-g6-a", SandboxID: "sb1", Generation: 6}},
		{StartExecution: nodev1.StartExecution{ExecID: "sb1-g7-b", SandboxID: "sb1", Generation: 7}},
		{StartExecution: nodev1.StartExecution{ExecID: "sb2-g9-c", SandboxID: "sb2", Generation: 9}},
	} {
		saveRecord(t, m, r)
	}
	m.retireOlder(nodev1.StartExecution{ExecID: "sb1-g8-d", SandboxID: "sb1", Generation: 8})
	for id, want := range map[string]bool{"sb1-g6-a": true, "sb1-g7-b": true, "sb2-g9-c": false} {
		rec, err := m.records.load(id)
		if err != nil || rec.Retired != want {
			t.Errorf("%s: retired = %v (%v), want %v", id, rec.Retired, err, want)
		}
	}
}

// TestLeases: a lease is released when its request ends and revoked with a
// cause when its execution stops.
func TestLeases(t *testing.T) {
	var l leases
	ctx, release, _ := l.acquire(context.Background(), surfaceGuest, "e1")
	if l.count("e1") != 1 {
		t.Fatalf("count = %d, want 1", l.count("e1"))
	}
	release()
	if l.count("e1") != 0 || ctx.Err() == nil {
		t.Fatalf("after release: count %d, ctx err %v", l.count("e1"), ctx.Err())
	}
	ctx, release, _ = l.acquire(context.Background(), surfaceGuest, "e1")
	defer release()
	if n := l.revoke("e1", errors.New("stopped")); n != 1 {
		t.Errorf("revoke = %d, want 1", n)
	}
	if context.Cause(ctx).Error() != "stopped" {
		t.Errorf("cause = %v", context.Cause(ctx))
	}
}
