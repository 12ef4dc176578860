package readcache

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/store/sqlite"
	"github.com/spacesandbox/space/internal/store/storetest"
)

// The reads of a request through the cache (hits after the first); the
// same benchmarks without it are internal/store/sqlite's BenchmarkGetSandbox.
//
//	go test ./internal/store/readcache ./internal/store/sqlite -run '^$' -bench 'GetSandbox$' -benchtime 20000x

func benchStore(b *testing.B) *Store {
	b.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "space.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return New(st, DefaultSize)
}

func BenchmarkGetSandbox(b *testing.B) { storetest.BenchGetSandbox(b, benchStore(b)) }
