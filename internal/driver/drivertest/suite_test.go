package drivertest

import (
	"os"
	"os/exec"
	"testing"
)

func TestStatPPID(t *testing.T) {
	tests := []struct {
		stat    string
		want    int
		wantErr bool
	}{
		{"42 (sh) S 7 42 42 0 -1", 7, false},
		// The command name is chosen by the process: spaces and parentheses.
		{"42 (a) b) c) R 1 42 42 0 -1", 1, false},
		{"42 (x", 0, true},
		{"42 (x) S", 0, true},
		{"42 (x) S notanumber", 0, true},
	}
	for _, tt := range tests {
		got, err := statPPID([]byte(tt.stat))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("statPPID(%q) = %d, %v; want %d, error %v", tt.stat, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestDescendants(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("skipping: cannot start sleep: %v", err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	got := descendants(os.Getpid())
	if _, ok := got[cmd.Process.Pid]; !ok {
		t.Errorf("descendants(%d) = %v, want the child %d", os.Getpid(), got, cmd.Process.Pid)
	}
	if _, ok := got[os.Getpid()]; ok {
		t.Errorf("descendants(%d) includes the process itself", os.Getpid())
	}
}
