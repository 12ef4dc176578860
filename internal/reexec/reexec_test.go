package reexec

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	Run(Helpers{
		"reexec-echo":     func(args []string) { fmt.Print(strings.Join(args, ",")); os.Exit(0) },
		"reexec-returner": func([]string) {},
	})
	os.Exit(m.Run())
}

// TestCommandRunsTheHelper: a helper runs in a new process of this binary
// with its arguments, and one that returns exits 126 saying so.
func TestCommandRunsTheHelper(t *testing.T) {
	out, err := Command("reexec-echo", "a", "b c").Output()
	if err != nil || string(out) != "a,b c" {
		t.Errorf("reexec-echo a 'b c' = %q, %v; want \"a,b c\"", out, err)
	}
	out, err = Command("reexec-returner").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 126 || !strings.Contains(string(out), "helper returned") {
		t.Errorf("reexec-returner = %v, %q; want exit 126 saying the helper returned", err, out)
	}
}
