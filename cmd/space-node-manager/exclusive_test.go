package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLockDataDirWaitsForItsPredecessor(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	first, err := lockDataDir(t.Context(), dir, time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		f, err := lockDataDir(t.Context(), dir, 10*time.Second, log)
		if err == nil {
			defer f.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a second node-manager locked the data directory while the first holds it (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	first.Close() // the predecessor exits
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("after the predecessor exited: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was not taken after its holder closed it")
	}
}

func TestLockDataDirRefusesAHolderThatStays(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	first, err := lockDataDir(t.Context(), dir, time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = lockDataDir(t.Context(), dir, 200*time.Millisecond, log)
	if err == nil {
		t.Fatal("a second node-manager started on a data directory whose node-manager stays")
	}
	if !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("the refusal %q does not name the holder and the directory", err)
	}
	if _, err := os.Stat(filepath.Join(dir, lockName)); err != nil {
		t.Fatal(err)
	}
}

func TestLockDataDirEndsWithItsContext(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	first, err := lockDataDir(t.Context(), dir, time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := lockDataDir(ctx, dir, time.Minute, log); err != context.DeadlineExceeded {
		t.Fatalf("waiting with a context that ends: %v, want its error", err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestBoundExitDumpsAndExits(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	exited := make(chan int, 1)
	boundExit(ctx, 50*time.Millisecond, &out, func(code int) { exited <- code })
	select {
	case <-exited:
		t.Fatal("exited before being told to stop")
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	select {
	case code := <-exited:
		if code != 1 {
			t.Fatalf("exit status %d, want 1", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not exited after the bound")
	}
	if s := out.String(); !strings.Contains(s, "TestBoundExitDumpsAndExits") || !strings.Contains(s, "goroutine") {
		t.Fatalf("the dump does not show the goroutines:\n%s", s)
	}
}
