package pgtest

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// shared is the server of a test binary, started by the first Database call
// and stopped by Main after every test ran.
var shared struct {
	mu      sync.Mutex // guards the fields below
	inMain  bool       // Main is running the tests, so it will stop srv
	srv     *Server
	err     error // why srv could not start; not retried
	started bool
}

// Main runs the tests of m and stops the shared server, then exits. Call it
// from TestMain in a package that uses Database.
func Main(m *testing.M) {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	srv := shared.srv
	shared.mu.Unlock()
	if srv != nil {
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: stop shared server: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// Database returns the URL of a fresh, empty database on the test binary's
// shared server, dropped when t ends. The package's TestMain must call Main,
// which stops the server. Like Start, it skips t when PostgreSQL is not
// installed and the test does not run as root.
func Database(t testing.TB) string {
	t.Helper()
	srv, err := sharedServer()
	if err != nil {
		skipOrFatal(t, err)
	}
	return srv.NewDatabase(t)
}

// SharedServer returns the test binary's shared server, starting it if
// needed; tests use it to reach the server directly (its TCP port). The same
// rules as Database apply.
func SharedServer(t testing.TB) *Server {
	t.Helper()
	srv, err := sharedServer()
	if err != nil {
		skipOrFatal(t, err)
	}
	return srv
}

func sharedServer() (*Server, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		return nil, fmt.Errorf("the shared server needs `func TestMain(m *testing.M) { pgtest.Main(m) }` to stop it")
	}
	if !shared.started {
		shared.started = true
		shared.srv, shared.err = StartServer()
	}
	return shared.srv, shared.err
}
