package server

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"
)

func TestNodeNotListening(t *testing.T) {
	_, err := net.Dial("unix", filepath.Join(t.TempDir(), "missing.sock"))
	if !nodeNotListening(err) {
		t.Errorf("dial of a missing socket: %v not taken for a node not listening", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := net.Dial("tcp", addr); !nodeNotListening(err) {
		t.Errorf("refused dial: %v not taken for a node not listening", err)
	}
	if nodeNotListening(context.DeadlineExceeded) {
		t.Error("a timeout taken for a node not listening")
	}
}

// TestWaitHeartbeat: a request to a restarting node waits for the node's
// next heartbeat here, not for one it sent before.
func TestWaitHeartbeat(t *testing.T) {
	n := NewNodes()
	if err := n.Register("node-a", "127.0.0.1:1", "tok"); err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	if n.waitHeartbeat(context.Background(), "node-a", since, 150*time.Millisecond) {
		t.Fatal("an older heartbeat counted")
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_ = n.Register("node-a", "127.0.0.1:1", "tok") // same address and token: a plain heartbeat
	}()
	if !n.waitHeartbeat(context.Background(), "node-a", since, 5*time.Second) {
		t.Error("the next heartbeat was not seen")
	}
}
