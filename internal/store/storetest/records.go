package storetest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

func testTemplates(t *testing.T, s store.Store) {
	list, err := s.ListTemplates(ctx(t))
	must(t, "ListTemplates empty", err)
	if list == nil || len(list) != 0 {
		t.Fatalf("ListTemplates on empty store = %#v, want empty non-nil", list)
	}
	base := store.Template{Name: "base", Source: "debootstrap:bookworm+python3", State: store.TemplateBuilding, CreatedAt: at(1)}
	minimal := store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady, SizeBytes: 2 << 20, CreatedAt: at(2)}
	must(t, "CreateTemplate", s.CreateTemplate(ctx(t), minimal))
	must(t, "CreateTemplate", s.CreateTemplate(ctx(t), base))
	wantClass(t, "CreateTemplate duplicate", s.CreateTemplate(ctx(t), base), errdefs.ErrConflict)

	got, err := s.GetTemplate(ctx(t), "base")
	must(t, "GetTemplate", err)
	if got.Source != base.Source || got.State != store.TemplateBuilding || !got.CreatedAt.Equal(at(1)) {
		t.Errorf("GetTemplate = %+v, want %+v", got, base)
	}
	_, err = s.GetTemplate(ctx(t), "nope")
	wantClass(t, "GetTemplate missing", err, errdefs.ErrNotFound)

	base.State, base.Reason, base.SizeBytes, base.Node = store.TemplateFailed, "debootstrap: exit status 1", 12345, "node-a"
	must(t, "UpdateTemplate", s.UpdateTemplate(ctx(t), base))
	got, _ = s.GetTemplate(ctx(t), "base")
	if got.State != store.TemplateFailed || got.Reason != base.Reason || got.SizeBytes != 12345 || got.Node != "node-a" || !got.CreatedAt.Equal(at(1)) {
		t.Errorf("after update = %+v, want %+v", got, base)
	}
	// The node a template is on alone is kept, and cleared as any field.
	pinned := store.Template{Name: "pinned", Source: "snapshot:sn-1", State: store.TemplateBuilding, Node: "node-b", CreatedAt: at(4)}
	must(t, "CreateTemplate pinned", s.CreateTemplate(ctx(t), pinned))
	if got, _ = s.GetTemplate(ctx(t), "pinned"); got.Node != "node-b" {
		t.Errorf("created with node node-b: got %+v", got)
	}
	pinned.Node = ""
	must(t, "UpdateTemplate pinned", s.UpdateTemplate(ctx(t), pinned))
	if got, _ = s.GetTemplate(ctx(t), "pinned"); got.Node != "" {
		t.Errorf("node cleared: got %+v", got)
	}
	must(t, "DeleteTemplate pinned", s.DeleteTemplate(ctx(t), "pinned"))
	wantClass(t, "UpdateTemplate missing", s.UpdateTemplate(ctx(t), store.Template{Name: "nope"}), errdefs.ErrNotFound)

	// The default egress policy is set apart and survives UpdateTemplate.
	policy := `{"allow_internet":false,"allow":{"domains":["pypi.org"]}}`
	must(t, "SetTemplateEgress", s.SetTemplateEgress(ctx(t), "base", policy))
	must(t, "UpdateTemplate", s.UpdateTemplate(ctx(t), base))
	if got, _ = s.GetTemplate(ctx(t), "base"); got.Egress != policy {
		t.Errorf("template egress = %q, want %q", got.Egress, policy)
	}
	must(t, "SetTemplateEgress clear", s.SetTemplateEgress(ctx(t), "base", ""))
	if got, _ = s.GetTemplate(ctx(t), "base"); got.Egress != "" {
		t.Errorf("cleared template egress = %q", got.Egress)
	}
	wantClass(t, "SetTemplateEgress missing", s.SetTemplateEgress(ctx(t), "nope", policy), errdefs.ErrNotFound)

	// The build's progress is set apart too and survives UpdateTemplate.
	prog := `{"phase":"build","message":"I: Retrieving libc6","done":12}`
	must(t, "SetTemplateProgress", s.SetTemplateProgress(ctx(t), "base", prog))
	must(t, "UpdateTemplate", s.UpdateTemplate(ctx(t), base))
	if got, _ = s.GetTemplate(ctx(t), "base"); got.Progress != prog {
		t.Errorf("template progress = %q, want %q", got.Progress, prog)
	}
	wantClass(t, "SetTemplateProgress missing", s.SetTemplateProgress(ctx(t), "nope", prog), errdefs.ErrNotFound)
	withPolicy := store.Template{Name: "locked", Source: "builtin:minimal", State: store.TemplateReady, Egress: policy, CreatedAt: at(3)}
	must(t, "CreateTemplate with egress", s.CreateTemplate(ctx(t), withPolicy))
	if got, _ = s.GetTemplate(ctx(t), "locked"); got.Egress != policy {
		t.Errorf("created template egress = %q", got.Egress)
	}
	must(t, "DeleteTemplate locked", s.DeleteTemplate(ctx(t), "locked"))

	list, err = s.ListTemplates(ctx(t))
	must(t, "ListTemplates", err)
	if len(list) != 2 || list[0].Name != "base" || list[1].Name != "minimal" {
		t.Fatalf("ListTemplates = %+v, want [base minimal]", list)
	}

	tn := newTenant(t, s, "a", at(1))
	sb := newSandbox(t, s, tn.ID, at(1)) // uses "minimal"
	wantClass(t, "DeleteTemplate in use", s.DeleteTemplate(ctx(t), "minimal"), errdefs.ErrConflict)
	must(t, "DeleteSandbox", s.DeleteSandbox(ctx(t), sb.ID))
	must(t, "DeleteTemplate", s.DeleteTemplate(ctx(t), "minimal"))
	wantClass(t, "DeleteTemplate again", s.DeleteTemplate(ctx(t), "minimal"), errdefs.ErrNotFound)
}

func testNodes(t *testing.T, s store.Store) {
	n := store.Node{
		ID: "node-b", Address: "unix:///run/space/node.sock",
		Capacity: store.Resources{CPUs: 2, MemoryMiB: 4096, DiskMiB: 100000},
		Runtimes: []string{"ns", "vm"}, State: store.NodeReady,
		RegisteredAt: at(1), LastHeartbeat: at(1),
	}
	must(t, "PutNode", s.PutNode(ctx(t), n))
	must(t, "PutNode", s.PutNode(ctx(t), store.Node{ID: "node-a", State: store.NodeDown, RegisteredAt: at(2), LastHeartbeat: at(2)}))

	got, err := s.GetNode(ctx(t), "node-b")
	must(t, "GetNode", err)
	if got.Address != n.Address || got.Capacity != n.Capacity || !equalStrings(got.Runtimes, n.Runtimes) ||
		got.State != store.NodeReady || !got.RegisteredAt.Equal(at(1)) || !got.LastHeartbeat.Equal(at(1)) {
		t.Errorf("GetNode = %+v, want %+v", got, n)
	}
	_, err = s.GetNode(ctx(t), "node-z")
	wantClass(t, "GetNode missing", err, errdefs.ErrNotFound)

	// Re-registering replaces the record but keeps the first RegisteredAt.
	n.Address, n.State, n.RegisteredAt, n.LastHeartbeat = "tcp://10.0.0.2:7071", store.NodeDraining, at(5), at(5)
	n.Runtimes = []string{"ns"}
	must(t, "PutNode again", s.PutNode(ctx(t), n))
	got, _ = s.GetNode(ctx(t), "node-b")
	if got.Address != n.Address || got.State != store.NodeDraining || !equalStrings(got.Runtimes, []string{"ns"}) ||
		!got.RegisteredAt.Equal(at(1)) || !got.LastHeartbeat.Equal(at(5)) {
		t.Errorf("after re-register = %+v; want new address/state/runtimes/heartbeat, RegisteredAt %v", got, at(1))
	}

	must(t, "Heartbeat", s.Heartbeat(ctx(t), "node-b", at(9)))
	got, _ = s.GetNode(ctx(t), "node-b")
	if !got.LastHeartbeat.Equal(at(9)) {
		t.Errorf("LastHeartbeat = %v, want %v", got.LastHeartbeat, at(9))
	}
	wantClass(t, "Heartbeat unregistered", s.Heartbeat(ctx(t), "node-z", at(9)), errdefs.ErrNotFound)

	list, err := s.ListNodes(ctx(t))
	must(t, "ListNodes", err)
	if len(list) != 2 || list[0].ID != "node-a" || list[1].ID != "node-b" || list[0].Runtimes != nil {
		t.Fatalf("ListNodes = %+v, want [node-a node-b], node-a without runtimes", list)
	}
	must(t, "DeleteNode", s.DeleteNode(ctx(t), "node-a"))
	wantClass(t, "DeleteNode again", s.DeleteNode(ctx(t), "node-a"), errdefs.ErrNotFound)
}

func testIdempotency(t *testing.T, s store.Store) {
	a := newTenant(t, s, "a", at(1))
	b := newTenant(t, s, "b", at(1))
	first := store.IdempotencyRecord{Tenant: a.ID, Key: "req-1", Fingerprint: "fp-1", Status: 201, Body: []byte("{\"id\":\"x\"}\x00\xff"), CreatedAt: at(1)}
	got, err := s.PutIdempotency(ctx(t), first)
	must(t, "PutIdempotency", err)
	if got.Status != 201 || !bytes.Equal(got.Body, first.Body) {
		t.Fatalf("PutIdempotency = %+v, want %+v", got, first)
	}

	// A replay of the same request returns the first response, not its own.
	replay := first
	replay.Status, replay.Body, replay.CreatedAt = 500, []byte("other"), at(2)
	got, err = s.PutIdempotency(ctx(t), replay)
	must(t, "PutIdempotency replay", err)
	if got.Status != 201 || !bytes.Equal(got.Body, first.Body) || !got.CreatedAt.Equal(at(1)) {
		t.Fatalf("replay returned %+v, want the first record", got)
	}

	other := first
	other.Fingerprint = "fp-2"
	_, err = s.PutIdempotency(ctx(t), other)
	wantClass(t, "PutIdempotency different request", err, errdefs.ErrConflict)

	// The same key of another tenant is independent.
	otherTenant := first
	otherTenant.Tenant, otherTenant.Fingerprint, otherTenant.CreatedAt = b.ID, "fp-b", at(3)
	_, err = s.PutIdempotency(ctx(t), otherTenant)
	must(t, "PutIdempotency other tenant", err)

	rec, err := s.GetIdempotency(ctx(t), a.ID, "req-1")
	must(t, "GetIdempotency", err)
	if rec.Fingerprint != "fp-1" || !bytes.Equal(rec.Body, first.Body) {
		t.Errorf("GetIdempotency = %+v, want %+v", rec, first)
	}
	_, err = s.GetIdempotency(ctx(t), a.ID, "req-9")
	wantClass(t, "GetIdempotency missing", err, errdefs.ErrNotFound)

	n, err := s.DeleteIdempotencyBefore(ctx(t), at(2))
	must(t, "DeleteIdempotencyBefore", err)
	if n != 1 {
		t.Errorf("DeleteIdempotencyBefore removed %d, want 1", n)
	}
	_, err = s.GetIdempotency(ctx(t), a.ID, "req-1")
	wantClass(t, "GetIdempotency expired", err, errdefs.ErrNotFound)
	if _, err := s.GetIdempotency(ctx(t), b.ID, "req-1"); err != nil {
		t.Errorf("newer record expired too: %v", err)
	}
}

func testEvents(t *testing.T, s store.Store) {
	list, err := s.ListEvents(ctx(t), "nosuchsandbox0000000")
	must(t, "ListEvents empty", err)
	if list == nil || len(list) != 0 {
		t.Fatalf("ListEvents with no events = %#v, want empty non-nil", list)
	}
	for i, typ := range []string{"state", "scheduled", "state"} {
		e, err := s.AppendEvent(ctx(t), store.Event{SandboxID: "sb-one", Time: at(i), Type: typ, Message: "m" + typ})
		must(t, "AppendEvent", err)
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d: Seq = %d, want %d", i, e.Seq, i+1)
		}
	}
	e, err := s.AppendEvent(ctx(t), store.Event{SandboxID: "sb-two", Type: "state"})
	must(t, "AppendEvent other sandbox", err)
	if e.Seq != 1 || e.Time.IsZero() {
		t.Errorf("first event of another sandbox: Seq %d Time %v, want 1 and now", e.Seq, e.Time)
	}
	_, err = s.AppendEvent(ctx(t), store.Event{SandboxID: "sb-one"})
	wantClass(t, "AppendEvent without type", err, errdefs.ErrInvalidArgument)

	prog := `{"phase":"upload","done":10,"total":20,"unit":"bytes"}`
	_, err = s.AppendEvent(ctx(t), store.Event{SandboxID: "sb-one", Time: at(3), Type: "progress", Message: "upload", Progress: prog})
	must(t, "AppendEvent with progress", err)

	list, err = s.ListEvents(ctx(t), "sb-one")
	must(t, "ListEvents", err)
	if len(list) != 4 || list[0].Type != "state" || list[1].Type != "scheduled" || !list[2].Time.Equal(at(2)) || list[1].Message != "mscheduled" {
		t.Fatalf("ListEvents = %+v", list)
	}
	if list[3].Progress != prog || list[0].Progress != "" {
		t.Errorf("event progress = %q and %q, want %q and none", list[3].Progress, list[0].Progress, prog)
	}
}

// testSandboxEvents: a store with store.SandboxEvents writes a sandbox and
// its events in one transaction — both or neither: a refused create (over
// quota) and a conflicting update append no event.
func testSandboxEvents(t *testing.T, s store.Store) {
	se, ok := s.(store.SandboxEvents)
	if !ok {
		t.Skip("the store does not write sandboxes and events together")
	}
	newTemplate(t, s, "minimal")
	tn := newTenant(t, s, "events", at(1))
	must(t, "SetTenantQuota", s.SetTenantQuota(ctx(t), tn.ID, store.Quota{MaxSandboxes: 1}))
	sb := quotaSandbox(tn.ID, 128, 1)
	evs := []store.Event{{SandboxID: sb.ID, Time: at(2), Type: "runtime", Message: "r"}, {SandboxID: sb.ID, Type: "scheduled", Message: "s"}}
	must(t, "CreateSandboxWithinQuotaAndEvents", se.CreateSandboxWithinQuotaAndEvents(ctx(t), sb, evs))
	if sb.Version != 1 || evs[0].Seq != 1 || evs[1].Seq != 2 {
		t.Errorf("after create: version %d, event seqs %d %d; want 1, 1 2", sb.Version, evs[0].Seq, evs[1].Seq)
	}
	over := quotaSandbox(tn.ID, 128, 1)
	wantQuotaError(t, "second create", se.CreateSandboxWithinQuotaAndEvents(ctx(t), over, []store.Event{{SandboxID: over.ID, Type: "scheduled"}}), "sandboxes")
	if list, err := s.ListEvents(ctx(t), over.ID); err != nil || len(list) != 0 {
		t.Errorf("events of a refused create: %+v, %v; want none", list, err)
	}
	bad := quotaSandbox(tn.ID, 128, 1)
	wantClass(t, "event naming another sandbox", se.CreateSandboxWithinQuotaAndEvents(ctx(t), bad, []store.Event{{SandboxID: sb.ID, Type: "x"}}), errdefs.ErrInvalidArgument)

	stale := sb.Clone()
	sb.State = sandbox.StateRunning
	must(t, "UpdateSandboxAndEvents", se.UpdateSandboxAndEvents(ctx(t), sb, []store.Event{{SandboxID: sb.ID, Type: "state", Message: "running"}}))
	if sb.Version != 2 {
		t.Errorf("version after update = %d, want 2", sb.Version)
	}
	stale.Node = "elsewhere"
	wantClass(t, "stale UpdateSandboxAndEvents", se.UpdateSandboxAndEvents(ctx(t), stale, []store.Event{{SandboxID: sb.ID, Type: "state", Message: "stale"}}), errdefs.ErrConflict)
	list, err := s.ListEvents(ctx(t), sb.ID)
	must(t, "ListEvents", err)
	var got []string
	for _, e := range list {
		got = append(got, e.Type+":"+e.Message)
	}
	if strings.Join(got, ",") != "runtime:r,scheduled:s,state:running" {
		t.Errorf("events = %v, want runtime:r, scheduled:s, state:running (none of the stale update)", got)
	}
	if cur, err := s.GetSandboxByID(ctx(t), sb.ID); err != nil || cur.State != sandbox.StateRunning || cur.Node == "elsewhere" {
		t.Errorf("stored sandbox %+v, %v", cur, err)
	}
}
