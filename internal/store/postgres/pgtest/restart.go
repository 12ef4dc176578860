package pgtest

import (
	"fmt"
	"path/filepath"
	"syscall"
	"time"
)

// Restart shuts the server down at once, as a crash would (immediate
// shutdown: every connection is cut, open transactions are lost, and the
// next start replays the WAL), and starts it again on the same data, port
// and socket. It returns once the server takes connections again.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	next, err := startPostgres(s.bin, s.Dir, filepath.Join(s.Dir, "data"), s.Port, s.cred, s.logPath)
	if err != nil {
		return fmt.Errorf("pgtest: restart: %w", err)
	}
	s.cmd, s.exited = next.cmd, next.exited
	return nil
}
