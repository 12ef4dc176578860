package node

import "testing"

// agreeClock gives m a clock measure that agrees with the control plane's,
// as the first answered heartbeat does: without one a node refuses every
// capability (clock.go).
func agreeClock(t testing.TB, m *Manager) {
	t.Helper()
	r := m.readClock()
	if !m.clock.observe(r, r, r.wall) {
		t.Fatal("clock measure not taken")
	}
}
