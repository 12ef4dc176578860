package node

import (
	"os"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
)

// BenchmarkRecordLoad is the runtime record read that handleGuest does per
// guest request (open, read and parse record.json), so that retirement,
// fencing and generation changes written by other paths are seen at once.
func BenchmarkRecordLoad(b *testing.B) {
	r := records{dir: b.TempDir()}
	rec := &Record{
		StartExecution: nodev1.StartExecution{ExecID: "sb1-g3-x", SandboxID: "sb1", Generation: 3, ActivationID: "a-1", Runtime: "ns"},
		BridgePid:      1234, BridgeStartTime: 5678, BridgeExeDev: 1, BridgeExeIno: 2,
	}
	if err := os.MkdirAll(r.execDir(rec.ExecID), 0o700); err != nil {
		b.Fatal(err)
	}
	if err := r.save(rec); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := r.load(rec.ExecID); err != nil {
			b.Fatal(err)
		}
	}
}
