package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/template/imagecfg"
	space "github.com/spacesandbox/space/sdk/go"
)

// recordingBackend is an in-memory Backend: it records the execs and
// answers each with the exit code exit gives it, and records deletions.
type recordingBackend struct {
	exit func(cmd string) (int, string)

	mu      sync.Mutex // guards the fields below
	execs   []string
	deleted []string
	built   []string
	written map[string]string // path -> body of WriteFile
}

func (b *recordingBackend) TemplateTaken(context.Context, string) (bool, error) { return false, nil }
func (b *recordingBackend) CreateSandbox(context.Context, sandboxv1.CreateSandboxRequest) (string, error) {
	return "sb1", nil
}
func (b *recordingBackend) ForkSandbox(context.Context, string, string, string) (string, error) {
	return "", errors.New("no fork")
}
func (b *recordingBackend) DeleteSandbox(_ context.Context, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleted = append(b.deleted, id)
	return nil
}
func (b *recordingBackend) Exec(_ context.Context, _ string, start sandboxv1.ExecStart, stdout, _ io.Writer) (int, error) {
	cmd := strings.Join(start.Cmd, " ")
	if r := start.Env["SPACE_READY_CMD"]; r != "" {
		cmd = "READY " + r
	}
	b.mu.Lock()
	b.execs = append(b.execs, cmd)
	b.mu.Unlock()
	code, out := b.exit(cmd)
	fmt.Fprint(stdout, out)
	return code, nil
}
func (b *recordingBackend) WriteFile(_ context.Context, _, name string, r io.Reader) error {
	body, err := io.ReadAll(r)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written == nil {
		b.written = map[string]string{}
	}
	b.written[name] = string(body)
	return err
}
func (b *recordingBackend) Snapshot(context.Context, string, string) (string, error) {
	return "snap1", nil
}
func (b *recordingBackend) DeleteSnapshot(context.Context, string, string) error { return nil }
func (b *recordingBackend) BuildTemplate(_ context.Context, req sandboxv1.BuildTemplateRequest) (*sandboxv1.Template, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.built = append(b.built, req.Name+" from "+req.From)
	return &sandboxv1.Template{Name: req.Name, State: "ready"}, nil
}

// TestRunReadyCheck: with Ready set, the start command is started and
// the check run after the steps; a check that never passes fails the build
// as the step after the last (StepError.Index == len(Steps)) with its
// output, makes no template and removes the sandbox; one that passes
// builds the template.
func TestRunReadyCheck(t *testing.T) {
	df := parseDF(t, "FROM minimal\nRUN true\nCMD [\"/bin/sh\", \"-c\", \"serve\"]\n")
	for _, passes := range []bool{false, true} {
		t.Run(fmt.Sprintf("passes=%v", passes), func(t *testing.T) {
			b := &recordingBackend{exit: func(cmd string) (int, string) {
				if strings.HasPrefix(cmd, "READY ") && !passes {
					return 124, "ready command did not exit 0 within 300s"
				}
				return 0, ""
			}}
			p, err := Prepare(Job{Name: "t", File: df, Ready: "test -f /ready"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = Run(context.Background(), b, p)
			var started, checked bool
			for _, c := range b.execs {
				started = started || strings.Contains(c, "'/bin/sh' '-c' 'serve'") && strings.Contains(c, "&")
				checked = checked || c == "READY test -f /ready"
			}
			if !started || !checked {
				t.Errorf("execs %q: want the start command started in the background and the ready check run", b.execs)
			}
			if len(b.deleted) != 1 {
				t.Errorf("deleted %v, want the build sandbox", b.deleted)
			}
			if passes {
				if err != nil || len(b.built) != 1 {
					t.Errorf("Run = %v, built %v; want the template built", err, b.built)
				}
				cfg, perr := imagecfg.Parse([]byte(b.written[imagecfg.Path]))
				if perr != nil || cfg.SpaceReadyCmd != "test -f /ready" || cfg.SpaceReadyTimeout != 0 {
					t.Errorf("image config %q (%v): want SpaceReadyCmd test -f /ready, the default wait", b.written[imagecfg.Path], perr)
				}
				return
			}
			var se *StepError
			if !errors.As(err, &se) || se.Index != len(df.Steps) || !strings.Contains(err.Error(), "ready check") || !strings.Contains(err.Error(), "did not exit 0") {
				t.Errorf("Run = %v, want a StepError at index %d naming the ready check and its output", err, len(df.Steps))
			}
			if len(b.built) != 0 {
				t.Errorf("built %v after a failed ready check", b.built)
			}
		})
	}
}

// TestPrepareReady: the ready command goes into the image config with the
// job's bound capped at the guest's maximum; one the guest would refuse is
// refused before any step.
func TestPrepareReady(t *testing.T) {
	df := parseDF(t, "FROM minimal\nCMD [\"serve\"]\n")
	p, err := Prepare(Job{Name: "t", File: df, Ready: "true", ReadyTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := imagecfg.Parse(p.cfgJSON)
	if err != nil || cfg.SpaceReadyCmd != "true" || cfg.SpaceReadyTimeout != imagecfg.MaxReadyTimeout || len(cfg.Cmd) != 1 {
		t.Errorf("image config %s (%v): want Cmd, SpaceReadyCmd true, timeout %d", p.cfgJSON, err, imagecfg.MaxReadyTimeout)
	}
	for _, ready := range []string{"a\x00b", strings.Repeat("x", imagecfg.MaxReadyCmd+1)} {
		if _, err := Prepare(Job{Name: "t", File: df, Ready: ready}); err == nil || !strings.Contains(err.Error(), "SpaceReadyCmd") {
			t.Errorf("Prepare with ready command %.20q: %v, want an error naming SpaceReadyCmd", ready, err)
		}
	}
}

// TestRunStepError: a failing RUN is a StepError with its index, its exit
// code and output, and the sandbox is removed.
func TestRunStepError(t *testing.T) {
	df := parseDF(t, "FROM minimal\nENV A=1\nRUN exit 7\n")
	b := &recordingBackend{exit: func(cmd string) (int, string) {
		if strings.Contains(cmd, "exit 7") {
			return 7, "about to fail\n"
		}
		return 0, ""
	}}
	p, err := Prepare(Job{Name: "t", File: df})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), b, p)
	var se *StepError
	if !errors.As(err, &se) || se.Index != 1 || !strings.Contains(err.Error(), "exit code 7") || !strings.Contains(err.Error(), "about to fail") {
		t.Errorf("Run = %v, want a StepError at index 1 with exit code 7 and the output", err)
	}
	if len(b.deleted) != 1 {
		t.Errorf("deleted %v, want the build sandbox", b.deleted)
	}
}

// quotaBackend refuses the build sandbox as the server does over quota.
type quotaBackend struct{ recordingBackend }

func (b *quotaBackend) CreateSandbox(context.Context, sandboxv1.CreateSandboxRequest) (string, error) {
	return "", &space.APIError{Status: 429, Code: sandboxv1.CodeResourceExhausted, Reason: "quota_exceeded", Message: "tenant t is over its quota"}
}

// TestRunQuotaRefusal: a build refused by the tenant's quota says what of
// it counts: its one running sandbox, not the cache's stopped holders.
func TestRunQuotaRefusal(t *testing.T) {
	p, err := Prepare(Job{Name: "t", File: parseDF(t, "FROM minimal\nRUN true\n")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), &quotaBackend{}, p)
	if err == nil || !strings.Contains(err.Error(), "build sandbox from minimal: tenant t is over its quota; a build runs one sandbox") || !strings.Contains(err.Error(), "holders are stopped and do not count") {
		t.Errorf("Run over quota = %v, want the refusal and what a build counts", err)
	}
	var ae *space.APIError
	if !errors.Is(err, errdefs.ErrQuotaExceeded) || errors.As(err, &ae) {
		t.Errorf("Run over quota = %#v: want ErrQuotaExceeded, not the API error (whose message alone a CLI shows)", err)
	}
	if _, err := Run(context.Background(), &recordingBackend{exit: func(string) (int, string) { return 0, "" }}, p); err != nil && strings.Contains(err.Error(), "quota") {
		t.Errorf("Run without a refusal = %v, want no quota hint", err)
	}
}

// holdingBackend is a recordingBackend with a step cache of fixed holders;
// it records the build sandbox's origin: a create (with its runtime) or a
// fork (of which holder).
type holdingBackend struct {
	recordingBackend
	holders []Holder
	origin  string
}

func (b *holdingBackend) CreateSandbox(_ context.Context, req sandboxv1.CreateSandboxRequest) (string, error) {
	b.origin = "create runtime=" + req.Runtime
	return "sb1", nil
}

func (b *holdingBackend) ForkSandbox(_ context.Context, holder, snapshot, _ string) (string, error) {
	b.origin = "fork " + holder + " from " + snapshot
	return "sb2", nil
}

func (b *holdingBackend) Holders(context.Context) ([]Holder, error) { return b.holders, nil }

func (b *holdingBackend) KeepHolder(context.Context, string, string) error { return nil }

// TestBuildRuntimeAndCachedHolders: the build sandbox is created on the
// job's runtime ("" leaves it to the server's default); a cached step is
// reused only from a holder of that runtime, since a fork keeps its
// holder's runtime: a vm build never continues in an ns holder's fork.
func TestBuildRuntimeAndCachedHolders(t *testing.T) {
	df := parseDF(t, "FROM minimal\nRUN echo one > /a\nRUN echo two > /b\n")
	p, err := Prepare(Job{Name: "t", File: df})
	if err != nil {
		t.Fatal(err)
	}
	first, err := cacheName(p.keys[0])
	if err != nil {
		t.Fatal(err)
	}
	nsHolder := Holder{ID: "holder-ns", Template: "t", Runtime: "ns", Snapshots: map[string]string{first: "sn-1"}}
	for _, tc := range []struct {
		runtime string
		want    string
	}{
		{"vm", "create runtime=vm"},
		{"ns", "fork holder-ns from sn-1"},
		{"", "fork holder-ns from sn-1"},
	} {
		t.Run("runtime="+tc.runtime, func(t *testing.T) {
			b := &holdingBackend{holders: []Holder{nsHolder}}
			b.exit = func(string) (int, string) { return 0, "" }
			p, err := Prepare(Job{Name: "t", File: df, Runtime: tc.runtime})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Run(context.Background(), b, p); err != nil {
				t.Fatal(err)
			}
			if b.origin != tc.want {
				t.Errorf("build sandbox: %s, want %s", b.origin, tc.want)
			}
		})
	}
}
