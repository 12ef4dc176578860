package node

import (
	"os"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
)

// BenchmarkRecordLoad is the runtime record read that handleGuest did per
// guest request before the cache (open, read and parse record.json), the
// baseline of BenchmarkRecordLoadShared.
func BenchmarkRecordLoad(b *testing.B) {
	r, id := savedRecord(b, records{dir: b.TempDir()})
	for b.Loop() {
		if _, err := r.load(id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRecordLoadShared is handleGuest's read of the runtime record
// with the cache (a stat per request when the record is unchanged).
func BenchmarkRecordLoadShared(b *testing.B) {
	r, id := savedRecord(b, records{dir: b.TempDir(), cache: newRecordCache()})
	for b.Loop() {
		if _, err := r.loadShared(id); err != nil {
			b.Fatal(err)
		}
	}
}

// savedRecord saves a typical runtime record in r and returns its id.
func savedRecord(b *testing.B, r records) (records, string) {
	b.Helper()
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
	return r, rec.ExecID
}
