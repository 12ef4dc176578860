package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// TestHeartbeatAnswerCarriesTheControlPlanesTime: nodes measure their
// clocks against server_time (internal/node/clock.go); it is the control
// plane's wall clock when it answered, in UTC.
func TestHeartbeatAnswerCarriesTheControlPlanesTime(t *testing.T) {
	cp := newControlPlane(t, Config{})
	hb, _ := json.Marshal(Heartbeat{Address: "127.0.0.1:9", Token: "token-n1", Runtimes: []string{"ns"}, CPUs: 4, MemoryMiB: 1 << 10, DiskMiB: 1 << 10})
	req, _ := http.NewRequest(http.MethodPost, cp.url+HeartbeatPath("n1"), bytes.NewReader(hb))
	req.Header.Set("Authorization", "Bearer "+testJoinToken)
	before := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	after := time.Now()
	var reply HeartbeatReply
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("heartbeat: HTTP %d %v", resp.StatusCode, err)
	}
	if reply.ServerTime.Before(before.Truncate(time.Microsecond)) || reply.ServerTime.After(after) || reply.ServerTime.Location() != time.UTC {
		t.Errorf("server_time %v, want a UTC time in [%v, %v]", reply.ServerTime, before, after)
	}
}
