package server

import (
	"testing"
	"time"
)

// TestHeartbeatAnswerCarriesTheControlPlanesTime: nodes measure their
// clocks against server_time (internal/node/clock.go); it is the control
// plane's wall clock when it answered, in UTC.
func TestHeartbeatAnswerCarriesTheControlPlanesTime(t *testing.T) {
	cp := newControlPlane(t, Config{})
	before := time.Now()
	reply, err := heartbeatVia(t.Context(), nil, cp.url, "n1", testHeartbeat{Address: "127.0.0.1:9", Token: "token-n1", Runtimes: []string{"ns"}, CPUs: 4, MemoryMiB: 1 << 10, DiskMiB: 1 << 10})
	after := time.Now()
	if err != nil || reply.GetServerTime() == nil {
		t.Fatalf("heartbeat: %v, server time %v", err, reply.GetServerTime())
	}
	if st := reply.GetServerTime().AsTime(); st.Before(before.Truncate(time.Microsecond)) || st.After(after) || st.Location() != time.UTC {
		t.Errorf("server_time %v, want a UTC time in [%v, %v]", st, before, after)
	}
}
