package node

import (
	"os"
	"testing"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
)

// TestLoadSharedSeesEverySave: a record retired or fenced after a guest
// request read it is what the next request reads (the cache is keyed by the
// file's identity, and a save renames a new file into place); a removed
// record is not found.
func TestLoadSharedSeesEverySave(t *testing.T) {
	r := records{dir: t.TempDir(), cache: newRecordCache()}
	rec := &Record{StartExecution: nodev1.StartExecution{ExecID: "sb1-g1-x", SandboxID: "sb1", Generation: 1}}
	if err := os.MkdirAll(r.execDir(rec.ExecID), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := r.save(rec); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		got, err := r.loadShared(rec.ExecID)
		if err != nil || got.Fenced || got.Retired {
			t.Fatalf("read %d: %+v, %v", i, got, err)
		}
	}
	// The same size on disk (false → true adds bytes; keep the JSON the
	// same length with RetiredBy 1 → 2) must be seen too.
	rec.RetiredBy = 1
	if err := r.save(rec); err != nil {
		t.Fatal(err)
	}
	if got, err := r.loadShared(rec.ExecID); err != nil || got.RetiredBy != 1 {
		t.Fatalf("after retiring: %+v, %v", got, err)
	}
	rec.RetiredBy = 2
	if err := r.save(rec); err != nil {
		t.Fatal(err)
	}
	if got, err := r.loadShared(rec.ExecID); err != nil || got.RetiredBy != 2 {
		t.Fatalf("after a same-size save: retired_by %d, %v: the cache answered a stale record", got.RetiredBy, err)
	}
	rec.Fenced = true
	if err := r.save(rec); err != nil {
		t.Fatal(err)
	}
	if got, err := r.loadShared(rec.ExecID); err != nil || !got.Fenced {
		t.Fatalf("after fencing: %+v, %v: the cache answered a stale record", got, err)
	}
	if err := r.remove(rec.ExecID); err != nil {
		t.Fatal(err)
	}
	if got, err := r.loadShared(rec.ExecID); err == nil {
		t.Fatalf("after remove: %+v, want not found", got)
	}
}
