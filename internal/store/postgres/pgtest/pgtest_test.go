package pgtest

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestStartStop starts a server, reaches it over its socket and TCP, checks
// that it does not run as root, and that Stop leaves no process or file.
func TestStartStop(t *testing.T) {
	s, err := StartServer()
	if err != nil {
		skipOrFatal(t, err)
	}
	defer s.Stop()
	ctx := t.Context()
	name, err := s.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{s.URL(name), s.TCPURL(name)} {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatalf("connect %s: %v", url, err)
		}
		var db string
		if err := c.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil || db != name {
			t.Errorf("%s: current_database() = %q, %v; want %q", url, db, err, name)
		}
		c.Close(context.Background())
	}
	pid := s.cmd.Process.Pid
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Uid:") && strings.Fields(line)[1] == "0" {
			t.Errorf("postgres runs as root: %s", line)
		}
	}
	if err := s.DropDatabase(ctx, name); err != nil {
		t.Error(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process group %d still exists after Stop (kill: %v)", pid, err)
	}
	if _, err := os.Stat(s.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("server directory %s still exists after Stop: %v", s.Dir, err)
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}
