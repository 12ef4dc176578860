package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/store/storetest"
)

func benchStore(b *testing.B) *Store {
	b.Helper()
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "space.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkCreateSandbox(b *testing.B)   { storetest.BenchCreateSandbox(b, benchStore(b)) }
func BenchmarkGetSandbox(b *testing.B)      { storetest.BenchGetSandbox(b, benchStore(b)) }
func BenchmarkListSandboxes(b *testing.B)   { storetest.BenchListSandboxes(b, benchStore(b)) }
func BenchmarkNodeUsage(b *testing.B)       { storetest.BenchNodeUsage(b, benchStore(b)) }
func BenchmarkUpdateSandbox(b *testing.B)   { storetest.BenchUpdateSandbox(b, benchStore(b)) }
func BenchmarkRecordHeartbeat(b *testing.B) { storetest.BenchRecordHeartbeat(b, benchStore(b)) }
