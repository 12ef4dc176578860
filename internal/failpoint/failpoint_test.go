package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestArm: names and actions are checked; a typo is an error that changes
// nothing.
func TestArm(t *testing.T) {
	t.Cleanup(func() { _ = Arm("") })
	for _, tc := range []struct {
		spec string
		ok   bool
	}{
		{"", true},
		{"hibernate/after-parts=exit", true},
		{" hibernate/after-part=exit@3 , delete/after-stop=exit", true},
		{"hibernate/after-prats=exit", false}, // typo
		{"hibernate/after-parts", false},
		{"hibernate/after-parts=panic", false},
		{"hibernate/after-part=exit@0", false},
		{"hibernate/after-part=exit@x", false},
		{"delete/after-stop=exit,delete/after-stop=exit@2", false},
	} {
		if err := Arm("create/after-record=exit"); err != nil {
			t.Fatal(err)
		}
		err := Arm(tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("Arm(%q) = %v, want ok %v", tc.spec, err, tc.ok)
		}
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Arm(%q) = %v, want InvalidArgument", tc.spec, err)
			}
			if CreateAfterRecord.fireAt.Load() != 1 {
				t.Errorf("Arm(%q) failed and changed the armed points", tc.spec)
			}
		}
	}
}

// TestHitFiresOnTheNthHit: a disarmed point never exits, an armed one
// exits on the hit it names, once.
func TestHitFiresOnTheNthHit(t *testing.T) {
	var exits []int
	exit = func(code int) { exits = append(exits, code) }
	t.Cleanup(func() { exit = os.Exit; _ = Arm("") })
	if err := Arm("hibernate/after-part=exit@3"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		HibernateAfterParts.Hit() // disarmed
		HibernateAfterPart.Hit()
		if want := map[bool]int{true: 1, false: 0}[i >= 2]; len(exits) != want {
			t.Fatalf("after %d hits: %d exits, want %d", i+1, len(exits), want)
		}
	}
	if exits[0] != ExitCode {
		t.Errorf("exit code %d, want %d", exits[0], ExitCode)
	}
}

// TestRegistry: every point has a unique name of the form op/step and a
// doc, so SPACE_FAILPOINTS can name each and the e2e test drive each.
func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range All() {
		op, step, ok := strings.Cut(p.Name, "/")
		if !ok || op != p.Op || step == "" || p.Doc == "" {
			t.Errorf("point %+v: want name OP/STEP with its op, and a doc", p)
		}
		if seen[p.Name] {
			t.Errorf("point %s declared twice", p.Name)
		}
		seen[p.Name] = true
	}
	if len(seen) < 10 {
		t.Errorf("%d points, want the whole registry", len(seen))
	}
}

// TestExitKillsTheProcess runs this test binary with a point armed and
// checks it dies at the point with ExitCode, before the line after it.
func TestExitKillsTheProcess(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		if err := FromEnvironment(); err != nil {
			os.Stderr.WriteString(err.Error())
			os.Exit(2)
		}
		defer os.Stdout.WriteString("deferred function ran\n")
		DeleteAfterStop.Hit()
		os.Stdout.WriteString("survived the point\n")
		return
	}
	for _, tc := range []struct {
		env      string
		wantCode int
		wantOut  string
	}{
		{EnvVar + "=delete/after-stop=exit", ExitCode, ""},
		{EnvVar + "=", 0, "survived the point\n"},
		{EnvVar + "=delete/after-stpo=exit", 2, ""}, // a typo stops the process at start
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestExitKillsTheProcess$")
		cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", tc.env)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		code := cmd.ProcessState.ExitCode()
		if code != tc.wantCode || !strings.HasPrefix(string(out), tc.wantOut) || strings.Contains(string(out), "deferred") && code == ExitCode {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, stdout %q", tc.env, code, out, stderr.String(), tc.wantCode, tc.wantOut)
		}
		if tc.wantCode == ExitCode && !strings.Contains(stderr.String(), "failpoint delete/after-stop: exit 137") {
			t.Errorf("%s: stderr %q does not name the point", tc.env, stderr.String())
		}
	}
}

// BenchmarkDisarmedHit measures what a disarmed point costs on a hot path.
func BenchmarkDisarmedHit(b *testing.B) {
	for i := 0; i < b.N; i++ {
		HibernateAfterPart.Hit()
	}
}

// TestChildEnv: a process hands its children the points of their kind it
// was armed with, with the hit each fires at, and nothing when none is.
func TestChildEnv(t *testing.T) {
	t.Cleanup(func() { _ = Arm("") })
	if err := Arm("create/after-record=exit,exec/bridge-after-forward=exit@2,files/bridge-before-forward=exit,exec/guest-after-spawn=exit"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		process Process
		want    []string
	}{
		{Bridge, []string{EnvVar + "=exec/bridge-after-forward=exit@2,files/bridge-before-forward=exit@1"}},
		{Guest, []string{EnvVar + "=exec/guest-after-spawn=exit@1"}},
		{NodeManager, nil},
	} {
		got := ChildEnv(tc.process)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("ChildEnv(%s) = %q, want %q", tc.process, got, tc.want)
		}
		// What a child is handed arms it alike.
		if len(got) == 1 {
			if err := Arm(strings.TrimPrefix(got[0], EnvVar+"=")); err != nil {
				t.Errorf("a child armed with %q: %v", got[0], err)
			}
			if again := ChildEnv(tc.process); strings.Join(again, " ") != strings.Join(got, " ") {
				t.Errorf("re-armed from %q: ChildEnv = %q", got, again)
			}
			_ = Arm("create/after-record=exit,exec/bridge-after-forward=exit@2,files/bridge-before-forward=exit,exec/guest-after-spawn=exit")
		}
	}
	_ = Arm("")
	if got := ChildEnv(Bridge); got != nil {
		t.Errorf("disarmed: ChildEnv = %q, want nil", got)
	}
}
