package storetest

import (
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// testSandboxRoundTrip checks that every field survives a write and a read.
func testSandboxRoundTrip(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "a", at(1))
	sb := sandbox.New(tn.ID, sandbox.Spec{
		Template: "base", Runtime: "vm", Name: "agent ✓", CPUs: 4, MemoryMiB: 4096, DiskMiB: 8192,
		Env:         map[string]string{"PATH": "/usr/bin", "QUOTE": `a"b\c`, "EMPTY": ""},
		Metadata:    map[string]string{"owner": "ünïcode"},
		IdleTimeout: 90 * time.Second, IdleAction: sandbox.IdleHibernate,
		Egress:  policy(t, `{"allow_internet":false,"allow":{"domains":["*.pypi.org"],"cidrs":["10.1.0.0/16"],"ports":["443"]},"deny":{"domains":["evil.example.com"]}}`),
		Project: "billing-2",
	}, at(1))
	sb.ExpiresAt = at(30)
	sb.CACert, sb.CAKey = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", []byte{0, 1, 2, 0xff, 'k'}
	sb.StartFrom = "sn-fork-source"
	must(t, "CreateSandbox", s.CreateSandbox(ctx(t), sb))
	got, err := s.GetSandbox(ctx(t), tn.ID, sb.ID)
	must(t, "GetSandbox", err)
	checkSandbox(t, "after create", got, sb)

	// Change every mutable field.
	sb.Name, sb.Template, sb.Runtime = "renamed", "base2", "ns"
	sb.CPUs, sb.MemoryMiB, sb.DiskMiB = 2, 256, 1024
	sb.Env, sb.Metadata = map[string]string{"X": "1"}, nil
	sb.ExpiresAt = at(45)
	sb.State, sb.Node = sandbox.StateRunning, "node-1"
	must(t, "Fail", sb.Fail("guest exited with status 137"))
	sb.Generation = 1 << 40
	sb.ExecID, sb.ActivationID = sandbox.NewExecID(sb.ID, sb.Generation), sandbox.NewActivationID()
	sb.StartFrom = "sn-rollback-target"
	sb.IdleTimeout, sb.IdleAction = 10*time.Minute, sandbox.IdlePause
	sb.Egress = policy(t, `{"allow_internet":true,"deny":{"ports":["25"],"cidrs":["2001:db8::/32"]}}`)
	sb.Project, sb.CACert, sb.CAKey = "other", "new cert", []byte("sealed key 2")
	must(t, "UpdateSandbox", s.UpdateSandbox(ctx(t), sb))
	if sb.Version != 2 {
		t.Fatalf("Version after one update = %d, want 2", sb.Version)
	}
	got, err = s.GetSandboxByID(ctx(t), sb.ID)
	must(t, "GetSandboxByID", err)
	checkSandbox(t, "after update", got, sb)

	// Clearing the expiry stores "no timeout"; clearing StartFrom starts
	// from the template; clearing the policy leaves the sandbox to the
	// control plane's default.
	sb.ExpiresAt, sb.StartFrom, sb.Egress = time.Time{}, "", nil
	sb.Project, sb.CACert, sb.CAKey = "", "", nil
	must(t, "UpdateSandbox clear expiry and start point", s.UpdateSandbox(ctx(t), sb))
	got, err = s.GetSandboxByID(ctx(t), sb.ID)
	must(t, "GetSandboxByID", err)
	if !got.ExpiresAt.IsZero() {
		t.Errorf("ExpiresAt = %v after clearing, want zero", got.ExpiresAt)
	}
	checkSandbox(t, "after clearing", got, sb)
}

func checkSandbox(t *testing.T, when string, got, want *sandbox.Sandbox) {
	t.Helper()
	type scalar struct {
		ID, Tenant, Name, Template, Runtime     string
		CPUs, MemoryMiB, DiskMiB                int
		Desired, State                          sandbox.State
		Reason, Node, ExecID, ActivationID      string
		StartFrom, IdleAction                   string
		Project, CACert, CAKey                  string
		IdleTimeout                             time.Duration
		Generation                              uint64
		Version                                 int64
		CreatedAt, ExpiresAt, UpdatedAtUnixNano int64
		ExpiresSet                              bool
	}
	flat := func(sb *sandbox.Sandbox) scalar {
		sc := scalar{sb.ID, sb.Tenant, sb.Name, sb.Template, sb.Runtime, sb.CPUs, sb.MemoryMiB, sb.DiskMiB,
			sb.Desired, sb.State, sb.Reason, sb.Node, sb.ExecID, sb.ActivationID, sb.StartFrom, sb.IdleAction,
			sb.Project, sb.CACert, string(sb.CAKey), sb.IdleTimeout, sb.Generation, sb.Version,
			sb.CreatedAt.UnixNano(), 0, sb.UpdatedAt.UnixNano(), !sb.ExpiresAt.IsZero()}
		if sc.ExpiresSet {
			sc.ExpiresAt = sb.ExpiresAt.UnixNano()
		}
		return sc
	}
	if g, w := flat(got), flat(want); g != w {
		t.Errorf("%s: stored sandbox\n got %+v\nwant %+v", when, g, w)
	}
	if !maps.Equal(got.Env, want.Env) || !maps.Equal(got.Metadata, want.Metadata) {
		t.Errorf("%s: env/metadata = %v %v, want %v %v", when, got.Env, got.Metadata, want.Env, want.Metadata)
	}
	if (got.Egress == nil) != (want.Egress == nil) || !reflect.DeepEqual(got.Egress.Spec(), want.Egress.Spec()) {
		t.Errorf("%s: egress = %s (nil %t), want %s (nil %t)", when,
			sandbox.EgressJSON(got.Egress), got.Egress == nil, sandbox.EgressJSON(want.Egress), want.Egress == nil)
	}
}

// policy parses an egress policy for a test.
func policy(t *testing.T, js string) *egress.Policy {
	t.Helper()
	p, err := egress.ParsePolicy([]byte(js))
	must(t, "ParsePolicy", err)
	return p
}

func testSandboxTenantIsolation(t *testing.T, s store.Store) {
	a := newTenant(t, s, "a", at(1))
	b := newTenant(t, s, "b", at(1))
	sb := newSandbox(t, s, a.ID, at(1))
	_, err := s.GetSandbox(ctx(t), b.ID, sb.ID)
	wantClass(t, "GetSandbox of another tenant", err, errdefs.ErrNotFound)
	_, err = s.GetSandbox(ctx(t), a.ID, "nosuchsandbox0000000")
	wantClass(t, "GetSandbox missing", err, errdefs.ErrNotFound)
	if got, err := s.GetSandbox(ctx(t), a.ID, sb.ID); err != nil || got.ID != sb.ID {
		t.Fatalf("GetSandbox own = %v, %v", got, err)
	}
}

func testSandboxOptimisticConcurrency(t *testing.T, s store.Store) {
	tn := newTenant(t, s, "a", at(1))
	sb := newSandbox(t, s, tn.ID, at(1))
	first, second := sb.Clone(), sb.Clone()
	first.Node = "node-1"
	must(t, "first UpdateSandbox", s.UpdateSandbox(ctx(t), first))
	second.Node = "node-2"
	wantClass(t, "stale UpdateSandbox", s.UpdateSandbox(ctx(t), second), errdefs.ErrConflict)
	if second.Version != 1 {
		t.Errorf("failed update changed Version to %d", second.Version)
	}
	got, err := s.GetSandboxByID(ctx(t), sb.ID)
	must(t, "GetSandboxByID", err)
	if got.Node != "node-1" || got.Version != 2 {
		t.Fatalf("stored node %q version %d, want node-1 2 (the stale write must not land)", got.Node, got.Version)
	}
	// Re-read and retry succeeds.
	got.Node = "node-2"
	must(t, "UpdateSandbox after re-read", s.UpdateSandbox(ctx(t), got))
}

// testSandboxConcurrentUpdates runs writers on different sandboxes and on one
// shared sandbox at once. Writers of the shared one re-read and retry on
// Conflict; no increment may be lost.
func testSandboxConcurrentUpdates(t *testing.T, s store.Store) {
	const workers, rounds = 8, 10
	tn := newTenant(t, s, "a", at(1))
	shared := newSandbox(t, s, tn.ID, at(1))
	own := make([]*sandbox.Sandbox, workers)
	for i := range own {
		own[i] = newSandbox(t, s, tn.ID, at(2))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	for w := range workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			sb := own[w]
			for r := range rounds {
				sb.Node = fmt.Sprintf("node-%d-%d", w, r)
				if err := s.UpdateSandbox(ctx(t), sb); err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, r, err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range rounds {
				if err := incrementCounter(t, s, shared.ID); err != nil {
					errs <- fmt.Errorf("worker %d: increment: %w", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for w, sb := range own {
		got, err := s.GetSandboxByID(ctx(t), sb.ID)
		must(t, "GetSandboxByID", err)
		if want := fmt.Sprintf("node-%d-%d", w, rounds-1); got.Node != want || got.Version != 1+rounds {
			t.Errorf("sandbox of worker %d: node %q version %d, want %q %d", w, got.Node, got.Version, want, 1+rounds)
		}
	}
	got, err := s.GetSandboxByID(ctx(t), shared.ID)
	must(t, "GetSandboxByID shared", err)
	if n, _ := strconv.Atoi(got.Metadata["counter"]); n != workers*rounds || got.Version != int64(1+workers*rounds) {
		t.Errorf("shared counter = %d version %d, want %d and %d (lost updates)", n, got.Version, workers*rounds, 1+workers*rounds)
	}
}

// incrementCounter adds one to the "counter" metadata entry of a sandbox with
// a read-modify-write loop that retries on Conflict.
func incrementCounter(t *testing.T, s store.Store, id string) error {
	for attempt := 0; attempt < 10000; attempt++ {
		sb, err := s.GetSandboxByID(ctx(t), id)
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(sb.Metadata["counter"])
		if sb.Metadata == nil {
			sb.Metadata = map[string]string{}
		}
		sb.Metadata["counter"] = strconv.Itoa(n + 1)
		err = s.UpdateSandbox(ctx(t), sb)
		if err == nil {
			return nil
		}
		if !errdefs.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("sandbox %s: still conflicting after 10000 attempts", id)
}
