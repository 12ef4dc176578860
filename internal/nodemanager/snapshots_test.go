package nodemanager

import (
	"context"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
)

func TestSnapshots(t *testing.T) {
	c, st, _ := startServer(t)
	ctx := context.Background()
	if _, err := c.EnsureTemplate(ctx, "minimal", "builtin:minimal"); err != nil {
		t.Fatal(err)
	}
	args := privop.StartArgs{ExecID: "sb1-g1-abc", SandboxID: "sb1", Template: "minimal", Runtime: "ns", Hostname: "sb1", CPUs: 1, MemoryMiB: 256, PidsMax: 256}
	_, ch, _, err := c.Start(ctx, args)
	if err != nil {
		t.Fatal(err)
	}
	ch.Close()
	snap := privop.SnapshotArgs{SnapshotID: "snap-1", ExecID: "sb1-g1-abc", Runtime: "ns", Kind: privop.SnapshotDisk, SandboxID: "sb1", Template: "minimal"}
	info, err := c.Snapshot(ctx, snap)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if info.ID != "snap-1" || info.Kind != privop.SnapshotDisk || info.SandboxID != "sb1" || info.Runtime != "ns" || info.CreatedAt.IsZero() {
		t.Errorf("info = %+v", info)
	}
	if of, _ := st.snapshotOf("snap-1"); of != "sb1-g1-abc" {
		t.Errorf("volume snapshot taken of %q, want the execution's volume sb1-g1-abc", of)
	}
	// Repeating it returns the same snapshot; another sandbox's request for
	// the id is refused.
	again, err := c.Snapshot(ctx, snap)
	if err != nil || !again.CreatedAt.Equal(info.CreatedAt) {
		t.Errorf("repeat = %+v, %v; want the first", again, err)
	}
	other := snap
	other.SandboxID = "sb2"
	if _, err := c.Snapshot(ctx, other); !errdefs.IsConflict(err) {
		t.Errorf("same id for another sandbox: %v, want Conflict", err)
	}
	// The ns runtime cannot save memory.
	full := snap
	full.SnapshotID, full.Kind = "snap-2", privop.SnapshotFull
	if _, err := c.Snapshot(ctx, full); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("full snapshot on ns: %v, want FailedPrecondition", err)
	}
	if _, ok := st.snapshotOf("snap-2"); ok {
		t.Error("a refused snapshot left files behind")
	}
	list, err := c.Snapshots(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "snap-1" {
		t.Errorf("Snapshots = %+v, %v", list, err)
	}
	// A new execution starts from the snapshot, without the template.
	args2 := args
	args2.ExecID, args2.Snapshot = "sb1-g2-def", "snap-1"
	if err := c.DeleteTemplate(ctx, "minimal"); err != nil {
		t.Fatal(err)
	}
	_, ch2, _, err := c.Start(ctx, args2)
	if err != nil {
		t.Fatalf("Start from snapshot: %v", err)
	}
	ch2.Close()
	if !st.hasClone("sb1-g2-def") {
		t.Error("the new execution's volume was not cloned from the snapshot")
	}
	args3 := args2
	args3.ExecID, args3.Snapshot = "sb1-g3-xyz", "missing"
	if _, _, _, err := c.Start(ctx, args3); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Start from a missing snapshot: %v, want FailedPrecondition", err)
	}
	if err := c.DeleteSnapshot(ctx, "snap-1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSnapshot(ctx, "snap-1"); err != nil {
		t.Errorf("second delete: %v", err)
	}
	if list, _ := c.Snapshots(ctx); len(list) != 0 {
		t.Errorf("Snapshots after delete = %+v", list)
	}
}

func TestSnapshotValidation(t *testing.T) {
	c, _, _ := startServer(t)
	ctx := context.Background()
	good := privop.SnapshotArgs{SnapshotID: "snap-1", ExecID: "sb1-g1-abc", Runtime: "ns", Kind: privop.SnapshotDisk, SandboxID: "sb1", Template: "minimal"}
	for name, edit := range map[string]func(*privop.SnapshotArgs){
		"id with dots":   func(a *privop.SnapshotArgs) { a.SnapshotID = "../x" },
		"empty id":       func(a *privop.SnapshotArgs) { a.SnapshotID = "" },
		"bad exec":       func(a *privop.SnapshotArgs) { a.ExecID = "a/b" },
		"bad kind":       func(a *privop.SnapshotArgs) { a.Kind = "memory" },
		"bad sandbox":    func(a *privop.SnapshotArgs) { a.SandboxID = "X" },
		"bad template":   func(a *privop.SnapshotArgs) { a.Template = "../t" },
		"unknown exec":   func(a *privop.SnapshotArgs) {},
		"unknown driver": func(a *privop.SnapshotArgs) { a.Runtime = "vm" },
	} {
		a := good
		edit(&a)
		_, err := c.Snapshot(ctx, a)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if !errdefs.IsInvalidArgument(err) && !errdefs.IsFailedPrecondition(err) && !errdefs.IsUnavailable(err) {
			t.Errorf("%s: %v, want a client error", name, err)
		}
	}
	if err := c.DeleteSnapshot(ctx, "../../etc"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("delete with a path: %v, want InvalidArgument", err)
	}
}
