package e2e

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"
)

// TestRunCodeLifecycle keeps the code interpreter's state across pause and
// resume on ns and vm, and across hibernate and restore on vm (whose
// hibernation keeps the guest's memory). An ns hibernation keeps the disk
// only: the interpreter starts anew at the restore, and the first call in
// the default context answers ContextLost instead of running in a silently
// empty one. The vm runs under TCG here: few cases, generous timeouts.
// SPACE_TEST_RUNCODE_RUNTIMES (e.g. "ns") narrows the runtimes.
func TestRunCodeLifecycle(t *testing.T) {
	in := startServerEnv(t, newDataDir(t), templateCacheEnv())
	defer in.stop()
	start := time.Now()
	in.buildCodeInterpreter(t)
	t.Logf("template code-interpreter built in %v", time.Since(start).Round(time.Millisecond))
	c := space.NewClient(in.url, in.key)
	runtimes := []string{"ns", "vm"}
	if only := os.Getenv("SPACE_TEST_RUNCODE_RUNTIMES"); only != "" {
		runtimes = strings.Split(only, ",")
	}
	// The runtimes run side by side (the vm one is mostly TCG time): the
	// group returns when both have, before the server stops.
	t.Run("runtime", func(t *testing.T) {
		for _, rt := range runtimes {
			t.Run(rt, func(t *testing.T) {
				t.Parallel()
				if rt == "vm" {
					if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
						t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
				defer cancel()
				created := time.Now()
				sb := createRunCodeSandbox(t, in, rt)
				defer in.delete(sb.ID)
				if _, err := c.WaitForState(ctx, sb.ID, sandboxv1.StateRunning); err != nil {
					t.Fatal(err)
				}
				run := func(code string) *space.Execution {
					t.Helper()
					ex, err := c.RunCode(ctx, sb.ID, code, space.RunCodeOptions{})
					if err != nil {
						t.Fatalf("RunCode(%q): %v\n%s", code, err, in.logs())
					}
					return ex
				}
				first := time.Now()
				if ex := run("1+1"); ex.Text() != "2" || ex.Error != nil {
					t.Fatalf("1+1: text %q, error %+v", ex.Text(), ex.Error)
				}
				t.Logf("%s: created and running in %v; first RunCode(\"1+1\") %v", rt, first.Sub(created).Round(time.Millisecond), time.Since(first).Round(time.Millisecond))
				// Figures, not assertions: a warm RunCode("1+1") against a raw
				// exec round trip of the same sandbox, interleaved.
				var codeDs, execDs []time.Duration
				for range 10 {
					s := time.Now()
					if ex := run("1+1"); ex.Text() != "2" {
						t.Fatalf("1+1: %q", ex.Text())
					}
					codeDs = append(codeDs, time.Since(s))
					s = time.Now()
					if res := in.exec(sb.ID, "true"); res.ExitCode != 0 {
						t.Fatalf("exec true: %+v", res)
					}
					execDs = append(execDs, time.Since(s))
				}
				slices.Sort(codeDs)
				slices.Sort(execDs)
				t.Logf("%s: warm RunCode(\"1+1\") p50 %v (max %v); exec `true` p50 %v (max %v); ratio %.2f", rt,
					codeDs[len(codeDs)/2], codeDs[len(codeDs)-1], execDs[len(execDs)/2], execDs[len(execDs)-1],
					float64(codeDs[len(codeDs)/2])/float64(execDs[len(execDs)/2]))

				run("x = 41")
				lifecycle(t, c, ctx, sb.ID, "pause", sandboxv1.StatePaused)
				lifecycle(t, c, ctx, sb.ID, "resume", sandboxv1.StateRunning)
				if ex := run("x + 1"); ex.Text() != "42" || ex.Error != nil {
					t.Errorf("%s: x + 1 after pause and resume: text %q, error %+v", rt, ex.Text(), ex.Error)
				}
				run("y = 7")
				lifecycle(t, c, ctx, sb.ID, "hibernate", sandboxv1.StateHibernated)
				lifecycle(t, c, ctx, sb.ID, "restore", sandboxv1.StateRunning)
				ex := run("y * 6")
				if rt == "vm" {
					if ex.Text() != "42" || ex.Error != nil {
						t.Errorf("vm: y * 6 after hibernate and restore: text %q, error %+v", ex.Text(), ex.Error)
					}
					return
				}
				// ns: the memory is gone; the first call says so and runs nothing.
				if ex.Error == nil || ex.Error.Name != "ContextLost" || !strings.Contains(ex.Error.Value, "did not run") || ex.Text() != "" {
					t.Errorf("ns: the first call after hibernate and restore: text %q, error %+v; want ContextLost", ex.Text(), ex.Error)
				}
				if ex := run("'y' in dir()"); ex.Text() != "False" || ex.Error != nil {
					t.Errorf("ns: the call after ContextLost: text %q, error %+v; want a fresh context", ex.Text(), ex.Error)
				}
			})
		}
	})
}

// createRunCodeSandbox creates a code-interpreter sandbox on runtime rt,
// waiting (vm) while the node is still fetching its kernel.
func createRunCodeSandbox(t *testing.T, in *instance, rt string) sandbox {
	t.Helper()
	var sb struct {
		sandbox
		Message string `json:"message"`
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		code := in.do("POST", "/v1/sandboxes", map[string]any{"template": "code-interpreter", "runtime": rt, "memory_mib": 1024}, &sb)
		if code == http.StatusCreated || code == http.StatusAccepted {
			return sb.sandbox
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("create a %s code-interpreter sandbox: HTTP %d %s\n%s", rt, code, sb.Message, in.logs())
		}
		time.Sleep(time.Second)
	}
}

// lifecycle runs op on sandbox id and waits for state want.
func lifecycle(t *testing.T, c *space.Client, ctx context.Context, id, op string, want sandboxv1.State) {
	t.Helper()
	var err error
	switch op {
	case "pause":
		_, err = c.PauseSandbox(ctx, id)
	case "resume":
		_, err = c.ResumeSandbox(ctx, id)
	case "hibernate":
		_, err = c.HibernateSandbox(ctx, id)
	case "restore":
		_, err = c.RestoreSandbox(ctx, id)
	}
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	if _, err := c.WaitForState(ctx, id, want); err != nil {
		t.Fatalf("%s: wait for %s: %v", op, want, err)
	}
}
