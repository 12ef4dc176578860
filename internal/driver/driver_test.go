package driver

import (
	"os"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func validSpec() Spec {
	return Spec{ExecID: "e-1", SandboxID: "sb-1", RootFS: "/var/lib/space/volumes/e-1", GuestBinary: "/usr/lib/space/space-guest"}
}

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Spec)
		ok     bool
	}{
		{"valid", func(*Spec) {}, true},
		{"limits", func(s *Spec) { s.CPUs, s.MemoryMiB, s.PidsMax = 2, 512, 1024 }, true},
		{"hostname", func(s *Spec) { s.Hostname = "box-1.example" }, true},
		{"empty exec", func(s *Spec) { s.ExecID = "" }, false},
		{"upper exec", func(s *Spec) { s.ExecID = "E1" }, false},
		{"slash exec", func(s *Spec) { s.ExecID = "../x" }, false},
		{"long exec", func(s *Spec) { s.ExecID = strings.Repeat("a", 65) }, false},
		{"bad sandbox", func(s *Spec) { s.SandboxID = "a_b" }, false},
		{"relative root", func(s *Spec) { s.RootFS = "volumes/e-1" }, false},
		{"unclean root", func(s *Spec) { s.RootFS = "/var/../etc" }, false},
		{"slash root", func(s *Spec) { s.RootFS = "/" }, false},
		{"nul guest", func(s *Spec) { s.GuestBinary = "/a\x00b" }, false},
		{"bad hostname", func(s *Spec) { s.Hostname = "-x" }, false},
		{"hostname underscore", func(s *Spec) { s.Hostname = "a_b" }, false},
		{"negative cpus", func(s *Spec) { s.CPUs = -1 }, false},
		{"tiny memory", func(s *Spec) { s.MemoryMiB = 1 }, false},
		{"huge pids", func(s *Spec) { s.PidsMax = MaxPids + 1 }, false},
		{"env with =", func(s *Spec) { s.Env = map[string]string{"A=B": "c"} }, false},
		{"env nul", func(s *Spec) { s.Env = map[string]string{"A": "b\x00"} }, false},
		{"env huge", func(s *Spec) { s.Env = map[string]string{"A": strings.Repeat("x", MaxEnvBytes)} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.mutate(&s)
			err := s.Validate()
			if tt.ok && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if !tt.ok && !errdefs.IsInvalidArgument(err) {
				t.Fatalf("Validate() = %v, want an InvalidArgument error", err)
			}
		})
	}
}

func TestParseStatStartTime(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 42 1000 20", 42, true},
		{"7 (a) b) (c) R 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 99 1000 20", 99, true},
		{"1 (init) S 0 1", 0, false},
		{"no paren", 0, false},
		{"1 (x) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 -5 1", 0, false},
	}
	for _, tt := range tests {
		got, err := ParseStatStartTime([]byte(tt.in))
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("ParseStatStartTime(%q) = %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestProcStartTimeSelf(t *testing.T) {
	st, err := ProcStartTime(os.Getpid())
	if err != nil {
		t.Fatalf("ProcStartTime(self): %v", err)
	}
	if !ProcAlive(os.Getpid(), st) {
		t.Fatalf("ProcAlive(self, %d) = false, want true", st)
	}
	if ProcAlive(os.Getpid(), st+1) {
		t.Fatalf("ProcAlive(self, wrong start time) = true, want false")
	}
	if _, err := ProcStartTime(1 << 30); !errdefs.IsNotFound(err) {
		t.Fatalf("ProcStartTime(absent pid) = %v, want NotFound", err)
	}
}

func FuzzParseStatStartTime(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 42 1000 20"))
	f.Add([]byte("7 (a) b) (c) R"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseStatStartTime(b)
	})
}
