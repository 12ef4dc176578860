package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestFindVirtioPort(t *testing.T) {
	sys := t.TempDir()
	for port, name := range map[string]string{"vport1p1": "org.qemu.guest_agent.0", "vport2p1": "space.guest\n"} {
		if err := os.MkdirAll(filepath.Join(sys, port), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sys, port, "name"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := findVirtioPort(sys, "/dev", "space.guest")
	if err != nil || got != "/dev/vport2p1" {
		t.Errorf("findVirtioPort(space.guest) = %q, %v; want /dev/vport2p1", got, err)
	}
	if _, err := findVirtioPort(sys, "/dev", "missing"); err == nil {
		t.Errorf("findVirtioPort(missing) succeeded")
	}
}

func TestWaitHost(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A writer is connected: no hang-up, so waitHost returns at once.
	if err := waitHost(ctx, r); err != nil {
		t.Fatalf("waitHost with a connected peer = %v", err)
	}
	// The peer is gone: waitHost waits until ctx ends.
	w.Close()
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	if err := waitHost(short, r); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waitHost without a peer = %v, want the deadline", err)
	}
}

func TestReseedFromHostErrors(t *testing.T) {
	if err := reseedFromHost(context.Background(), filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("reseed from a missing device succeeded")
	}
	// A device that never gives enough bytes: a pipe nobody writes to.
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := reseedFromHost(ctx, "/proc/self/fd/"+strconv.Itoa(int(r.Fd()))); err == nil {
		t.Error("reseed from a silent device succeeded")
	}
}
