package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

func benchStore(b *testing.B) (*Store, string) {
	b.Helper()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "space.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "bench", CreatedAt: time.Now().UTC()}
	if err := s.CreateTenant(ctx, tn); err != nil {
		b.Fatal(err)
	}
	if err := s.CreateTemplate(ctx, store.Template{Name: "minimal", Source: "builtin:minimal", State: store.TemplateReady}); err != nil {
		b.Fatal(err)
	}
	return s, tn.ID
}

// BenchmarkCreateSandbox: one durable sandbox insert (every create does one).
func BenchmarkCreateSandbox(b *testing.B) {
	s, tenant := benchStore(b)
	ctx := context.Background()
	for b.Loop() {
		sb := sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
		if err := s.CreateSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateSandbox: one optimistic-concurrency update of a sandbox
// (every lifecycle step writes one or more).
func BenchmarkUpdateSandbox(b *testing.B) {
	s, tenant := benchStore(b)
	ctx := context.Background()
	sb := sandbox.New(tenant, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256}, time.Now())
	if err := s.CreateSandbox(ctx, sb); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		cur, err := s.GetSandboxByID(ctx, sb.ID)
		if err != nil {
			b.Fatal(err)
		}
		cur.Reason = time.Now().String()
		if err := s.UpdateSandbox(ctx, cur); err != nil {
			b.Fatal(err)
		}
	}
}
