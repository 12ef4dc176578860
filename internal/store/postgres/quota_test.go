package postgres

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
)

// TestReplicasAdmitWithinQuota races creates and restores of one tenant
// through three replicas' stores on one database: the tenant ends with
// exactly as many sandboxes holding resources as its quota allows.
func TestReplicasAdmitWithinQuota(t *testing.T) {
	ctx := t.Context()
	url := pgtest.Database(t)
	replicas := []*Store{mustOpen(t, url), mustOpen(t, url), mustOpen(t, url)}
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "racy", Quota: store.Quota{MaxSandboxes: 4, MaxMemoryMiB: 4 * 256}}
	if err := replicas[0].CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	// A within-quota create checks that its template exists.
	if err := replicas[0].CreateTemplate(ctx, store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady}); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256, DiskMiB: 512}
	// Hibernated sandboxes to restore: they hold nothing yet.
	var hibernated []*sandbox.Sandbox
	for range 6 {
		sb := sandbox.New(tn.ID, spec, time.Now())
		sb.State = sandbox.StateHibernated
		if err := replicas[0].CreateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		hibernated = append(hibernated, sb)
	}
	const creates = 10
	var wg sync.WaitGroup
	errs := make(chan error, creates+len(hibernated))
	for i := range creates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- replicas[i%3].CreateSandboxWithinQuota(ctx, sandbox.New(tn.ID, spec, time.Now()))
		}()
	}
	for i, sb := range hibernated {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb.State = sandbox.StateRestoring
			errs <- replicas[(i+1)%3].UpdateSandboxWithinQuota(ctx, sb)
		}()
	}
	wg.Wait()
	close(errs)
	admitted := 0
	for err := range errs {
		var qe *store.QuotaError
		switch {
		case err == nil:
			admitted++
		case !errors.As(err, &qe):
			t.Errorf("admission: %v (want success or a quota error)", err)
		}
	}
	u, err := replicas[2].TenantUsage(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if admitted != 4 || u != (store.Usage{Sandboxes: 4, MemoryMiB: 1024, CPUs: 4}) {
		t.Errorf("%d racing admissions over 3 replicas: %d admitted, usage %+v; want exactly 4", creates+len(hibernated), admitted, u)
	}
}
