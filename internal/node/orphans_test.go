package node

import (
	"os"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
)

// TestKnownExecutions: every id the node-manager may know a node's
// execution by counts as known: a record's execution id, the physical id of
// a claimed prepared execution (its directory carries the sandbox's id), a
// record directory whose record is not written yet, and a start under way.
func TestKnownExecutions(t *testing.T) {
	m := &Manager{records: records{dir: t.TempDir()}, starting: map[string]bool{"sb4-g1-starting": true}}
	save := func(dir string, rec *Record) {
		t.Helper()
		if err := os.MkdirAll(m.records.execDir(dir), 0o700); err != nil {
			t.Fatal(err)
		}
		if rec != nil {
			if err := m.records.saveIn(dir, rec); err != nil {
				t.Fatal(err)
			}
		}
	}
	save("sb1-g1-plain", &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g1-plain"}})
	save("sb2-g1-claimed", &Record{StartExecution: nodev1.StartExecution{ExecID: "sb2-g1-claimed"}, Physical: "pool-abc"})
	save("sb3-g1-no-record-yet", nil)
	known, err := m.knownExecutions()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sb1-g1-plain", "sb2-g1-claimed", "pool-abc", "sb3-g1-no-record-yet", "sb4-g1-starting"} {
		if !known[id] {
			t.Errorf("%s is not known; a gc would stop it", id)
		}
	}
	if known["sb5-g1-orphan"] || len(known) != 5 {
		t.Errorf("known = %v; want exactly the five ids", known)
	}
}
