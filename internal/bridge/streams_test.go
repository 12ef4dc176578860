package bridge

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/errdefs"

	"encoding/json"
)

// TestBridgeCapsStreamsInFlight (catalogue C-6): a client holding
// MaxStreams process streams open gets its next request refused 429
// too_many_streams by the bridge — whatever the guest would allow — and
// counted; once a stream ends, a request passes again.
func TestBridgeCapsStreamsInFlight(t *testing.T) {
	const max = 3
	raw, _, _ := startBridge(t, func(c *Config) { c.MaxStreams = max })
	hc, _, _ := admitted(t, raw)
	pc := processv1connect.NewProcessClient(hc, "http://bridge")
	no := false
	var cancels []context.CancelFunc
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
	})
	for i := range max {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		stream, err := pc.Start(ctx, connect.NewRequest(&processv1.StartRequest{
			Process: &processv1.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"60"}}, Stdin: &no}))
		if err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
		// The start event: the stream is open end to end.
		if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
			t.Fatalf("stream %d: no start event (%v)", i, stream.Err())
		}
	}
	resp, err := hc.Get("http://bridge/envs")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var e nodev1.Error
	_ = json.Unmarshal(body, &e)
	if resp.StatusCode != http.StatusTooManyRequests || !errors.Is(apierr.Decode(e.Code, errdefs.Reason(e.Reason)), errdefs.ErrTooManyStreams) {
		t.Fatalf("request over the cap: HTTP %d %s; want 429 too_many_streams", resp.StatusCode, body)
	}
	if got := refusalCount(t, raw, RefusedTooManyStreams); got != 1 {
		t.Errorf("too_many_streams refusals counted = %d, want 1", got)
	}

	cancels[0]()
	for {
		// The cancelled stream's token is given back once the proxy has
		// seen the end; until then the cap still holds.
		if code, _ := getEnvs(t, hc); code == http.StatusOK {
			break
		} else if code != http.StatusTooManyRequests {
			t.Fatalf("after a stream ended: HTTP %d", code)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// refusalCount reads the bridge's count of refusals for reason.
func refusalCount(t *testing.T, hc *http.Client, reason string) uint64 {
	t.Helper()
	resp, err := hc.Get("http://bridge/bridge/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Refusals map[string]uint64 `json:"refusals"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m.Refusals[reason]
}
