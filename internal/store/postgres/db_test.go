package postgres

import (
	"testing"

	"github.com/spacesandbox/space/internal/store/sqlstore"
)

func TestRebindRemembers(t *testing.T) {
	q := `SELECT a FROM t WHERE id = ? AND b = ?`
	for range 2 {
		if got, want := rebind(q), sqlstore.Rebind(q); got != want {
			t.Fatalf("rebind(%q) = %q, want %q", q, got, want)
		}
	}
	if _, ok := rebound.Load(q); !ok {
		t.Error("rebind did not remember the query")
	}
}

func BenchmarkRebind(b *testing.B) {
	q := `UPDATE sandboxes SET name = ?, template = ?, runtime = ?, cpus = ?,
			memory_mib = ?, disk_mib = ?, env = ?, metadata = ?, expires_at = ?, desired_state = ?, state = ?,
			reason = ?, generation = ?, node_id = ?, exec_id = ?, activation_id = ?, start_from = ?,
			idle_timeout = ?, idle_action = ?, egress = ?, project = ?, ca_cert = ?, ca_key = ?,
			version = version + 1, updated_at = ? WHERE id = ? AND version = ?`
	for b.Loop() {
		rebind(q)
	}
}
