package storetest

import (
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// testServicePorts checks the exposed ports: round trip, replacement,
// order, per-sandbox isolation, deletion, and that deleting a sandbox
// deletes its ports.
func testServicePorts(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "a", at(1))
	sb1 := newSandbox(t, s, tn.ID, at(2))
	sb2 := newSandbox(t, s, tn.ID, at(3))

	list, err := s.ListServicePorts(ctx(t), sb1.ID)
	must(t, "ListServicePorts empty", err)
	if list == nil || len(list) != 0 {
		t.Fatalf("ListServicePorts with none = %#v, want empty non-nil", list)
	}
	p8080 := store.ServicePort{Sandbox: sb1.ID, Port: 8080, Protocol: "http", TokenHash: "abc", CreatedAt: at(4)}
	p22 := store.ServicePort{Sandbox: sb1.ID, Port: 22, Protocol: "tcp", Public: true, CreatedAt: at(5)}
	other := store.ServicePort{Sandbox: sb2.ID, Port: 8080, Protocol: "http", Public: true, CreatedAt: at(6)}
	for _, p := range []store.ServicePort{p8080, p22, other} {
		must(t, "PutServicePort", s.PutServicePort(ctx(t), p))
	}
	wantClass(t, "PutServicePort of an unknown sandbox",
		s.PutServicePort(ctx(t), store.ServicePort{Sandbox: "nosuchsandbox0000000", Port: 1, Protocol: "http", CreatedAt: at(1)}), errdefs.ErrNotFound)
	wantClass(t, "PutServicePort port -1", s.PutServicePort(ctx(t), store.ServicePort{Sandbox: sb1.ID, Port: -1, Protocol: "http"}), errdefs.ErrInvalidArgument)
	// Port 0 is the E2B rule for every HTTP port of a sandbox.
	any0 := store.ServicePort{Sandbox: sb2.ID, Port: 0, Protocol: "http", CreatedAt: at(7)}
	must(t, "PutServicePort port 0", s.PutServicePort(ctx(t), any0))
	if got, err := s.GetServicePort(ctx(t), sb2.ID, 0); err != nil || got != any0 {
		t.Errorf("GetServicePort port 0 = %+v, %v; want %+v", got, err, any0)
	}
	must(t, "DeleteServicePort port 0", s.DeleteServicePort(ctx(t), sb2.ID, 0))
	wantClass(t, "PutServicePort port 65536", s.PutServicePort(ctx(t), store.ServicePort{Sandbox: sb1.ID, Port: 65536, Protocol: "http"}), errdefs.ErrInvalidArgument)

	got, err := s.GetServicePort(ctx(t), sb1.ID, 8080)
	must(t, "GetServicePort", err)
	if got != p8080 {
		t.Errorf("GetServicePort = %+v, want %+v", got, p8080)
	}
	_, err = s.GetServicePort(ctx(t), sb1.ID, 8081)
	wantClass(t, "GetServicePort unexposed", err, errdefs.ErrNotFound)

	list, err = s.ListServicePorts(ctx(t), sb1.ID)
	must(t, "ListServicePorts", err)
	if len(list) != 2 || list[0] != p22 || list[1] != p8080 {
		t.Errorf("ListServicePorts = %+v, want [%+v %+v] (by port)", list, p22, p8080)
	}

	// Put replaces the entry of the same port.
	// Put replaces the entry of the same port, its host mask too.
	replaced := store.ServicePort{Sandbox: sb1.ID, Port: 8080, Protocol: "tcp", Public: true, HostMask: "${PORT}-x.example.com", CreatedAt: at(7)}
	must(t, "PutServicePort replace", s.PutServicePort(ctx(t), replaced))
	if got, err := s.GetServicePort(ctx(t), sb1.ID, 8080); err != nil || got != replaced {
		t.Errorf("GetServicePort after replace = %+v, %v; want %+v", got, err, replaced)
	}

	must(t, "DeleteServicePort", s.DeleteServicePort(ctx(t), sb1.ID, 22))
	wantClass(t, "DeleteServicePort again", s.DeleteServicePort(ctx(t), sb1.ID, 22), errdefs.ErrNotFound)
	if got, err := s.GetServicePort(ctx(t), sb2.ID, 8080); err != nil || got != other {
		t.Errorf("another sandbox's port after a delete = %+v, %v; want %+v", got, err, other)
	}

	// Deleting the sandbox deletes its ports, and only its ports.
	must(t, "DeleteSandbox", s.DeleteSandbox(ctx(t), sb1.ID))
	list, err = s.ListServicePorts(ctx(t), sb1.ID)
	must(t, "ListServicePorts of a deleted sandbox", err)
	if len(list) != 0 {
		t.Errorf("ports of a deleted sandbox = %+v, want none", list)
	}
	if list, err := s.ListServicePorts(ctx(t), sb2.ID); err != nil || len(list) != 1 {
		t.Errorf("ports of the other sandbox = %+v, %v; want 1", list, err)
	}
}
