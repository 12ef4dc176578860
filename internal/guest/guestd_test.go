package guest_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/guestd"
)

// TestAgainstDaemon drives the real daemon: Wait, /health, and Done once the
// daemon stops serving.
func TestAgainstDaemon(t *testing.T) {
	server, conn := socketPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- guestd.Serve(ctx, server, guestd.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := c.Wait(wctx); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	req, _ := http.NewRequestWithContext(wctx, "GET", guest.BaseURL+"/health", nil)
	resp, err := c.HTTPClient().Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("GET /health: %v %v, want 204", resp, err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	select {
	case <-c.Done():
	case <-wctx.Done():
		t.Fatal("Done not closed after the daemon stopped")
	}
}
