package node

import (
	"os"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
)

func TestRecordsRoundTrip(t *testing.T) {
	r := records{dir: t.TempDir()}
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g1-x", SandboxID: "sb1", Generation: 1}, BridgePid: 7, StartedAt: time.Now().UTC()}
	os.MkdirAll(r.execDir(rec.ExecID), 0o700)
	if err := r.save(rec); err != nil {
		t.Fatal(err)
	}
	got, err := r.load("sb1-g1-x")
	if err != nil || got.SandboxID != "sb1" || got.BridgePid != 7 {
		t.Fatalf("load = %+v, %v", got, err)
	}
	// A record whose content names another execution is refused.
	os.MkdirAll(r.execDir("other"), 0o700)
	os.WriteFile(r.execDir("other")+"/record.json", []byte(`{"exec_id":"sb1-g1-x"}`), 0o600)
	if _, err := r.load("other"); err == nil {
		t.Error("mismatched record loaded")
	}
	all, errs := r.all()
	if len(all) != 1 || len(errs) != 1 {
		t.Errorf("all = %d records, %d errors; want 1 and 1", len(all), len(errs))
	}
	if err := r.remove("sb1-g1-x"); err != nil {
		t.Fatal(err)
	}
}

func TestPidsFor(t *testing.T) {
	for _, tc := range []struct{ mem, want int }{{64, 256}, {512, 1024}, {1 << 20, 16384}} {
		if got := pidsFor(tc.mem); got != tc.want {
			t.Errorf("pidsFor(%d) = %d, want %d", tc.mem, got, tc.want)
		}
	}
}
