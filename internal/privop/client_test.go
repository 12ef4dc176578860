package privop

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestNodeManagerGone: with the node-manager not running, or killed in the
// middle of an operation (it read the request and closed without an
// answer), every operation fails at once as Unavailable — retryable, with
// the reason — never a hang nor a success; one that never answers ends
// with the caller's context.
func TestNodeManagerGone(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	ops := map[string]func(c *Client, ctx context.Context) error{
		"start": func(c *Client, ctx context.Context) error {
			_, _, _, err := c.Start(ctx, StartArgs{ExecID: "x"})
			return err
		},
		"cleanup": func(c *Client, ctx context.Context) error { return c.Cleanup(ctx, "x", "ns") },
		"pause":   func(c *Client, ctx context.Context) error { return c.Pause(ctx, "x", "ns") },
		"alive":   func(c *Client, ctx context.Context) error { _, err := c.Alive(ctx, "x"); return err },
	}

	missing := NewClient(filepath.Join(dir, "missing.sock"))
	for name, op := range ops {
		if err := op(missing, ctx); !errdefs.IsUnavailable(err) {
			t.Errorf("%s without a node-manager: err = %v, want Unavailable", name, err)
		}
	}

	// Killed mid-operation: reads the request, closes.
	sock := filepath.Join(dir, "dies.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hang := make(chan struct{})
	defer close(hang)
	mode := make(chan string, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var req Request
			_, _ = ReadMessage(c.(*net.UnixConn), &req)
			if m := <-mode; m == "hang" {
				go func() { <-hang; c.Close() }()
				continue
			}
			c.Close()
		}
	}()
	dies := NewClient(sock)
	for name, op := range ops {
		mode <- "die"
		if err := op(dies, ctx); !errdefs.IsUnavailable(err) {
			t.Errorf("%s with the node-manager killed before it answered: err = %v, want Unavailable", name, err)
		}
	}
	mode <- "hang"
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := dies.Cleanup(cctx, "x", "ns"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cleanup with a node-manager that never answers: err = %v, want the context's deadline", err)
	}
}
