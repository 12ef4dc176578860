package service

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/store"
)

// quietBeats is a Heartbeats with nothing to report.
type quietBeats struct{}

func (quietBeats) PendingRuntimes(string) []string         { return nil }
func (quietBeats) WarmNodes(nodev1.PoolKey) map[string]int { return nil }
func (quietBeats) NodeMemory() map[string]scheduler.Memory { return nil }

// TestPlaceOnTheTemplatesNode: a sandbox of a template that exists on one
// node alone (store.Template.Node, a snapshot: template) is placed there,
// though another node is freer; one of a template every node builds, or
// one starting from a snapshot, goes where the scheduler prefers; with
// the template's node gone, the create is refused saying why.
func TestPlaceOnTheTemplatesNode(t *testing.T) {
	st, a, _ := newTestStore(t)
	ctx := t.Context()
	now := time.Now().UTC()
	for _, n := range []store.Node{
		{ID: "n1", Capacity: store.Resources{CPUs: 8, MemoryMiB: 8192}, Runtimes: []string{"ns"}, State: store.NodeReady, LastHeartbeat: now},
		{ID: "n2", Capacity: store.Resources{CPUs: 8, MemoryMiB: 4096}, Runtimes: []string{"ns"}, State: store.NodeReady, LastHeartbeat: now},
	} {
		if err := st.PutNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	// newTestStore made minimal (every node builds it).
	for _, tpl := range []store.Template{
		{Name: "built", Source: "snapshot:sn-x", State: store.TemplateReady, Node: "n2"},
	} {
		if err := st.CreateTemplate(ctx, tpl); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Config{}, st, nil, quietBeats{}, now, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sb := func(template, startFrom string) *sandbox.Sandbox {
		x := sandbox.New(a, sandbox.Spec{Template: template, Runtime: "ns", CPUs: 1, MemoryMiB: 256}, now)
		x.StartFrom = startFrom
		return x
	}
	for _, tc := range []struct {
		what string
		sb   *sandbox.Sandbox
		want string
	}{
		{"template on n2 alone", sb("built", ""), "n2"},
		{"template on every node", sb("minimal", ""), "n1"},
		{"start from a snapshot of the template", sb("built", "sn-y"), "n1"},
	} {
		node, why, err := s.placeWith(ctx, tc.sb, nil)
		if err != nil || node != tc.want {
			t.Errorf("%s: placed on %q (%s, %v), want %s", tc.what, node, why, err, tc.want)
		}
		if pinned := tc.sb.Template == "built" && tc.sb.StartFrom == ""; pinned != strings.Contains(why, "only [n2] holds template built") {
			t.Errorf("%s: reason %q; want it to say why only n2 was a candidate: %v", tc.what, why, pinned)
		}
	}
	n2, _ := st.GetNode(ctx, "n2")
	n2.State = store.NodeDown
	if err := st.PutNode(ctx, n2); err != nil {
		t.Fatal(err)
	}
	_, _, err := s.placeWith(ctx, sb("built", ""), nil)
	if !errors.Is(err, errdefs.ErrNoCapacity) || !strings.Contains(err.Error(), "n1: only [n2] holds template built") {
		t.Errorf("template's node down: %v, want NoCapacity saying n1 lacks the template", err)
	}
}
