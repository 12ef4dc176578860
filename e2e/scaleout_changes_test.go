package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sandboxid "github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store/postgres/pgtest"
)

// TestScaleOutChangeAnnouncements starts PostgreSQL and two `space server`
// replicas on it, real processes without a node (nothing here needs one),
// and checks what `space server` wires up (docs/scale-out.md, "Change
// announcements between replicas"): each replica listens for sandbox
// changes on a connection of its own, and a pause request waiting on
// replica 0 is answered when the pause is written elsewhere. The write is
// made in SQL, standing in for the reconciler of a replica that drives the
// sandbox's node. The answer's delay after that write is logged, not
// asserted: without announcements replica 0's own retries (its passes cannot
// reach the missing node) would answer it too, within a second.
//
//	go test ./e2e -run TestScaleOutChangeAnnouncements -v
func TestScaleOutChangeAnnouncements(t *testing.T) {
	if bin.err != nil {
		t.Fatalf("build: %v", bin.err)
	}
	ctx := t.Context()
	url := pgtest.Start(t).NewDatabase(t)
	dir := t.TempDir()
	for _, d := range []string{"server", "kms"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the replicas said:\n%s", logs.String())
		}
	})
	var urls []string
	for i := range 2 { // one after the other: the first mints the keys
		urls = append(urls, startBareReplica(t, i, dir, url, logs))
	}
	key, err := os.ReadFile(filepath.Join(dir, "server", "admin.key"))
	if err != nil {
		t.Fatalf("admin key: %v", err)
	}
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())

	waitListeners(t, db, 2)

	var tenant string
	if err := db.QueryRow(ctx, `SELECT tenant_id FROM api_keys LIMIT 1`).Scan(&tenant); err != nil {
		t.Fatalf("admin tenant: %v", err)
	}
	id := sandboxid.NewID()
	now := time.Now().UnixNano()
	if _, err := db.Exec(ctx, `INSERT INTO sandboxes (id, tenant_id, name, template, runtime, cpus, memory_mib,
        disk_mib, env, metadata, created_at, desired_state, state, reason, generation, node_id, exec_id,
        activation_id, version, updated_at)
        VALUES ($1, $2, 'announced', 'minimal', 'ns', 1, 256, 512, '{}', '{}', $3, 'running', 'running', '', 1,
        'node-elsewhere', $4, $5, 1, $3)`,
		id, tenant, now, sandboxid.NewExecID(id, 1), sandboxid.NewActivationID()); err != nil {
		t.Fatalf("insert sandbox: %v", err)
	}
	type answer struct {
		code int
		body string
		at   time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, urls[0]+"/v1/sandboxes/"+id+"/pause", nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{body: err.Error(), at: time.Now()}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		answered <- answer{code: res.StatusCode, body: string(b), at: time.Now()}
	}()
	waitState(t, db, id, "pausing")
	time.Sleep(1500 * time.Millisecond) // the request is waiting
	written := time.Now()
	if _, err := db.Exec(ctx, `UPDATE sandboxes SET state = 'paused', desired_state = 'paused', version = version + 1
        WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-answered:
		if a.code != http.StatusOK || !strings.Contains(a.body, `"paused"`) {
			t.Fatalf("pause through replica 0: HTTP %d %s", a.code, a.body)
		}
		t.Logf("replica 0 answered the waiting pause %v after the write of the pause elsewhere began", a.at.Sub(written).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the pause through replica 0 was not answered 30s after it was written")
	}
}

// startBareReplica starts `space server` number i over the database at
// url, with its data in dir, and returns its API URL.
func startBareReplica(t *testing.T, i int, dir, url string, logs io.Writer) string {
	t.Helper()
	name := fmt.Sprintf("replica-%d", i)
	pr, pw := io.Pipe()
	p := startProc(t, name, logs, nil, pw, bin.space, "server", "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(dir, "server"), "--kms-dir", filepath.Join(dir, "kms"),
		"--database", url, "--no-base-template")
	t.Cleanup(func() {
		if !p.stop(30 * time.Second) {
			t.Errorf("%s did not stop within 30s of SIGTERM", name)
		}
		p.killGroup()
	})
	go func() { <-p.exited; pw.Close() }()
	lines := linesOf(pr, &prefixWriter{prefix: "[" + name + "] ", w: logs})
	deadline := time.After(time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s exited before it was ready", name)
			}
			if v, ok := strings.CutPrefix(l, "SPACE_API_URL="); ok {
				return v
			}
		case <-deadline:
			t.Fatalf("%s not ready after 1m", name)
		}
	}
}

// waitListeners waits until n connections listen for sandbox changes.
func waitListeners(t *testing.T, db *pgx.Conn, n int) {
	t.Helper()
	var got int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		err := db.QueryRow(t.Context(), `SELECT COUNT(*) FROM pg_stat_activity
            WHERE datname = current_database() AND application_name = 'space/changes'
            AND query = 'LISTEN space_sandboxes'`).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
	}
	t.Fatalf("%d connections listen for sandbox changes, want %d (one per replica)", got, n)
}

// waitState waits until sandbox id is in state.
func waitState(t *testing.T, db *pgx.Conn, id, state string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := db.QueryRow(t.Context(), `SELECT state FROM sandboxes WHERE id = $1`, id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got == state {
			return
		}
	}
	t.Fatalf("sandbox %s is %s after 20s, want %s", id, got, state)
}

// syncBuffer is a buffer several processes' output goes to.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
