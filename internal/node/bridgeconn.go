package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/unixsock"
)

// bridgeConn talks to one execution's host bridge. Every connection is checked:
// the peer on the socket must be the bridge process this node started (pid and
// start time from the runtime record), so a process that took over the socket
// path, or a reused pid, is refused.
type bridgeConn struct {
	execID    string
	transport *http.Transport
	client    *http.Client
}

func newBridgeConn(rec *Record, socket string) *bridgeConn {
	wantPid, wantStart := rec.BridgePid, rec.BridgeStartTime
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := unixsock.Dial(ctx, socket)
			if err != nil {
				return nil, err
			}
			if err := verifyPeer(c.(*net.UnixConn), wantPid, wantStart); err != nil {
				c.Close()
				return nil, err
			}
			return c, nil
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
	return &bridgeConn{execID: rec.ExecID, transport: tr, client: &http.Client{Transport: tr}}
}

func verifyPeer(c *net.UnixConn, wantPid int, wantStart uint64) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return fmt.Errorf("host bridge peer credentials: %w", credErr)
	}
	if int(cred.Pid) != wantPid {
		return fmt.Errorf("host bridge socket is served by pid %d, not the bridge pid %d", cred.Pid, wantPid)
	}
	start, err := driver.ProcStartTime(wantPid)
	if err != nil || start != wantStart {
		return fmt.Errorf("host bridge pid %d is not the process this node started", wantPid)
	}
	return nil
}

func (b *bridgeConn) close() { b.transport.CloseIdleConnections() }

func (b *bridgeConn) status(ctx context.Context) (bridge.Status, error) {
	var st bridge.Status
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://bridge/bridge/v1/status", nil)
	resp, err := b.client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("bridge status: HTTP %d", resp.StatusCode)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&st)
	return st, err
}

// waitReady polls the bridge until the guest answered, the bridge gave up, or
// timeout passes.
func (b *bridgeConn) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	// A local socket is cheap to ask; a fine poll keeps create latency low.
	delay := time.Millisecond
	var last error
	for time.Now().Before(deadline) {
		st, err := b.status(ctx)
		switch {
		case err == nil && st.Ready:
			return nil
		case err == nil && st.Reason != "":
			return fmt.Errorf("guest not ready: %s", st.Reason)
		case err != nil:
			last = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, 5*time.Millisecond)
	}
	if last != nil {
		return fmt.Errorf("guest not ready after %s: %w", timeout, last)
	}
	return fmt.Errorf("guest not ready after %s", timeout)
}

func (b *bridgeConn) init(ctx context.Context, req bridge.InitRequest) error {
	body, _ := json.Marshal(req)
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://bridge/bridge/v1/init", bytes.NewReader(body))
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(hreq)
	if err != nil {
		return fmt.Errorf("install identity: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("install identity: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

func (b *bridgeConn) stop(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://bridge/bridge/v1/stop", nil)
	if resp, err := b.client.Do(req); err == nil {
		resp.Body.Close()
	}
}

// post calls one of the bridge's bodiless POST endpoints.
func (b *bridgeConn) post(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://bridge"+path, nil)
	resp, err := b.client.Do(req)
	if err != nil {
		return fmt.Errorf("host bridge %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("host bridge %s: HTTP %d: %s", path, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// activity asks the guest when it last served a request.
func (b *bridgeConn) activity(ctx context.Context) (bridge.Activity, error) {
	var act bridge.Activity
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://bridge/bridge/v1/activity", nil)
	resp, err := b.client.Do(req)
	if err != nil {
		return act, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return act, fmt.Errorf("bridge activity: HTTP %d", resp.StatusCode)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&act)
	return act, err
}
