package localstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/spacesandbox/space/internal/credentials"
)

// BenchmarkResolve measures one Manager.Resolve over a store of 100
// credentials (four authenticated reads of the file) with an in-memory
// audit log.
func BenchmarkResolve(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	key := dir + "/k"
	if err := GenerateKeyFile(key); err != nil {
		b.Fatal(err)
	}
	s, err := Open(dir+"/db", key)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 100 {
		c := testCred(fmt.Sprintf("c%d", i), credentials.Scope{Tenant: "t1", Sandbox: fmt.Sprintf("sb%d", i%10)})
		c.RateLimit = 0
		if err := s.Put(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	m := credentials.NewManager(s, &credentials.MemoryAuditLog{})
	req := credentials.Request{Tenant: "t1", Sandbox: "sb3", Host: "api.github.com"}
	for b.Loop() {
		c, err := m.Resolve(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		c.Zero()
	}
}
