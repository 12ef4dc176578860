package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/postgres"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
)

// mapResolver answers from a table its test may change.
type mapResolver struct {
	mu sync.Mutex
	m  map[string][]netip.Addr
}

func (r *mapResolver) set(name string, as ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[name] = nil
	for _, a := range as {
		r.m[name] = append(r.m[name], netip.MustParseAddr(a))
	}
}

func (r *mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if as, ok := r.m[host]; ok {
		return as, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestHeartbeatInternalServices: with a real PostgreSQL database and an S3
// object store, the heartbeat answer lists the listener address the node
// reached, the node's own addresses (advertised and source), every
// registered node, the other replicas' addresses from the shared store, the
// database and object-store hosts and --deny-cidr; a
// rebound name keeps its old address listed until Keep has passed.
func TestHeartbeatInternalServices(t *testing.T) {
	pg := pgtest.Start(t)
	db, err := pg.CreateDatabase(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	dbURL := pg.TCPURL(db) // 127.0.0.1:PORT
	st, err := postgres.Open(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	objURL := "s3://space-objects/prod?endpoint=objects.deploy.test:7480&insecure=1"
	res := &mapResolver{m: map[string][]netip.Addr{}}
	res.set("objects.deploy.test", "45.9.9.9")
	res.set("node2.deploy.test", "45.7.7.7")
	res.set("cp.deploy.test", "45.3.3.3")
	if got, want := ServiceHosts(dbURL, objURL), []string{"127.0.0.1", "objects.deploy.test"}; !slices.Equal(got, want) {
		t.Fatalf("ServiceHosts = %q, want %q", got, want)
	}
	if err := st.PutNode(t.Context(), store.Node{ID: "n2", Address: "http://node2.deploy.test:7071", State: store.NodeReady}); err != nil {
		t.Fatal(err)
	}
	// Another replica on the same database published its own address.
	if err := st.PutReplicaAddresses(t.Context(), "replica-b", []string{"45.5.5.5"}, time.Now().Add(time.Hour), time.Now()); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nodes := NewNodes()
	rec := reconcile.New(reconcile.Config{}, st, func(id string) (reconcile.NodeAPI, error) { return nodes.Client(id) }, log)
	srv := New(Config{JoinToken: testJoinToken, Internal: InternalConfig{
		Hosts: ServiceHosts(dbURL, objURL), DenyCIDRs: []netip.Prefix{netip.MustParsePrefix("45.1.2.0/24")}, Resolver: res,
	}}, st, nodes, rec, log)
	// The API on 127.0.0.2; the node heartbeats from 127.0.0.6 and says
	// it listens on 127.0.0.3.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: srv.Handler()}
	go hs.Serve(ln)
	defer hs.Close()
	srv.internal.resolve(t.Context())

	client := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.6")}}).DialContext}}
	heartbeat := func(host string) InternalServices {
		t.Helper()
		hc := &http.Client{Transport: hostTransport{host: host, next: client.Transport}}
		reply, err := heartbeatVia(t.Context(), hc, "http://"+ln.Addr().String(), "n1", testHeartbeat{Address: "127.0.0.3:7071", Token: "node-token", Runtimes: []string{"ns"}, CPUs: 4, MemoryMiB: 4096})
		if err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		return internalOf(reply)
	}
	first := heartbeat("cp.deploy.test:7070")
	want := map[string]string{
		"127.0.0.2/32": "the listener as the node reached it",
		"127.0.0.6/32": "the node's source address",
		"127.0.0.3/32": "the node's advertised address",
		"45.7.7.7/32":  "another registered node (node2.deploy.test)",
		"127.0.0.1/32": "the PostgreSQL host",
		"45.9.9.9/32":  "the S3 endpoint (objects.deploy.test)",
		"45.1.2.0/24":  "--deny-cidr",
		"45.5.5.5/32":  "another replica's own address",
	}
	for c, what := range want {
		if !slices.Contains(first.CIDRs, c) {
			t.Errorf("the heartbeat answer lacks %s (%s): %q", c, what, first.CIDRs)
		}
	}
	// The name the node dialled is resolved in the background; once it
	// is, the next answer has it, with a newer version.
	srv.internal.resolve(t.Context())
	// This replica published the address the node reached it at, for the
	// other replicas.
	if shared, err := st.ListReplicaAddresses(t.Context(), time.Now()); err != nil || !slices.Contains(shared, "127.0.0.2") {
		t.Errorf("replica addresses in the store: %q, %v; want this replica's 127.0.0.2", shared, err)
	}
	second := heartbeat("cp.deploy.test:7070")
	if !slices.Contains(second.CIDRs, "45.3.3.3/32") || second.Version <= first.Version {
		t.Errorf("after resolving cp.deploy.test: version %d -> %d, %q", first.Version, second.Version, second.CIDRs)
	}
	if again := heartbeat("cp.deploy.test:7070"); again.Version != second.Version {
		t.Errorf("an unchanged list changed version: %d -> %d", second.Version, again.Version)
	}

	// The object store's name rebinds: the old address stays denied.
	res.set("objects.deploy.test", "45.9.9.10")
	srv.internal.resolve(t.Context())
	third := heartbeat("cp.deploy.test:7070")
	if !slices.Contains(third.CIDRs, "45.9.9.10/32") || !slices.Contains(third.CIDRs, "45.9.9.9/32") {
		t.Errorf("after rebinding objects.deploy.test: %q, want both 45.9.9.9 and 45.9.9.10", third.CIDRs)
	}
	// Once Keep has passed since it was last seen, the old address goes.
	srv.internal.mu.Lock()
	srv.internal.seen[netip.MustParseAddr("45.9.9.9")] = time.Now().Add(-2 * DefaultInternalKeep)
	srv.internal.mu.Unlock()
	srv.internal.resolve(t.Context())
	if fourth := heartbeat("cp.deploy.test:7070"); slices.Contains(fourth.CIDRs, "45.9.9.9/32") || !slices.Contains(fourth.CIDRs, "45.1.2.0/24") {
		t.Errorf("after Keep: %q, want 45.9.9.9 gone and --deny-cidr kept", fourth.CIDRs)
	}
}

func TestServiceHosts(t *testing.T) {
	for _, tc := range []struct {
		db, obj string
		want    []string
	}{
		{"", "", nil},
		{"sqlite:///var/lib/space/space.db", "file:///var/lib/space/objects", nil},
		{"postgres://u:p@db1.example:5432,db2.example:5433/space?sslmode=require", "s3://b?endpoint=[2a01:4f8::5]:9000", []string{"db1.example", "db2.example", "2a01:4f8::5"}},
		{"postgres://u@/space?host=/run/postgresql", "s3://b", nil},
		{"postgresql://u@/space?host=10.0.0.5&hostaddr=45.0.0.5", "s3://b?endpoint=minio.internal", []string{"10.0.0.5", "45.0.0.5", "minio.internal"}},
	} {
		if got := ServiceHosts(tc.db, tc.obj); !slices.Equal(got, tc.want) {
			t.Errorf("ServiceHosts(%q, %q) = %q, want %q", tc.db, tc.obj, got, tc.want)
		}
	}
}
