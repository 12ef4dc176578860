package node

import (
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/privop"
)

// TestSetInternalServices: a newer list replaces the node's, an older one
// (a delayed answer) does not, and a malformed one is refused with the held
// list kept.
func TestSetInternalServices(t *testing.T) {
	m, err := NewManager(Config{NodeID: "node-a", DataDir: t.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: "/bin/true"},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	denied := func(a string) bool { return !m.gateways.internal.Load().Check(netip.MustParseAddr(a)).Allow }
	if !denied("45.0.0.1") {
		t.Fatal("before any list an address is allowed")
	}
	if err := m.SetInternalServices(InternalServices{Version: 10, CIDRs: []string{"45.0.0.1/32"}}); err != nil {
		t.Fatal(err)
	}
	if !denied("45.0.0.1") || denied("45.0.0.2") {
		t.Fatal("list v10 not applied")
	}
	if err := m.SetInternalServices(InternalServices{Version: 9, CIDRs: []string{"45.0.0.2/32"}}); err != nil {
		t.Fatal(err)
	}
	if !denied("45.0.0.1") || denied("45.0.0.2") || m.InternalServicesVersion() != 10 {
		t.Fatalf("an older list (v9) replaced v10 (now v%d)", m.InternalServicesVersion())
	}
	err = m.SetInternalServices(InternalServices{Version: 11, CIDRs: []string{"45.0.0.3/32", "not-a-cidr"}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a malformed list: %v, want InvalidArgument", err)
	}
	if m.InternalServicesVersion() != 10 || !denied("45.0.0.1") {
		t.Fatal("a malformed list replaced the held one")
	}
}
