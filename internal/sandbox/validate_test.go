package sandbox

import (
	"errors"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

func TestValidateCreateDefaults(t *testing.T) {
	spec, err := ValidateCreate(sandboxv1.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := Spec{Template: DefaultTemplate, CPUs: DefaultCPUs, MemoryMiB: DefaultMemoryMiB, DiskMiB: DefaultDiskMiB}
	if spec.Template != want.Template || spec.CPUs != want.CPUs || spec.MemoryMiB != want.MemoryMiB || spec.DiskMiB != want.DiskMiB || spec.Timeout != 0 {
		t.Errorf("defaults = %+v, want %+v", spec, want)
	}
}

func TestValidateCreate(t *testing.T) {
	big := strings.Repeat("x", MaxEnvValueLen)
	manyEnv := map[string]string{}
	for i := range MaxEnvEntries + 1 {
		manyEnv[strings.Repeat("K", 1+i%200)+string(rune('a'+i%26))+strings.Repeat("z", i/26)] = "v"
	}
	tooMuchEnv := map[string]string{}
	for i := range 9 {
		tooMuchEnv[string(rune('A'+i))] = big
	}
	for _, tc := range []struct {
		name    string
		req     sandboxv1.CreateSandboxRequest
		wantErr string // substring; empty means valid
	}{
		{"ok full", sandboxv1.CreateSandboxRequest{Template: "my-tpl.v2_x", Runtime: "ns", Name: "agent 1", CPUs: 16, MemoryMiB: 65536, DiskMiB: 256, Env: map[string]string{"PATH": "/bin", "EMPTY": ""}, Timeout: "30m", Metadata: map[string]string{"owner": "ünï"}}, ""},
		{"metadata space.", sandboxv1.CreateSandboxRequest{Metadata: map[string]string{"space.tenant": "t"}}, "reserved for the platform"},
		{"metadata E2B/ any case", sandboxv1.CreateSandboxRequest{Metadata: map[string]string{"E2B/sandboxID": "x"}}, "reserved for the platform"},
		{"metadata padded", sandboxv1.CreateSandboxRequest{Metadata: map[string]string{" space:node": "n1"}}, "reserved for the platform"},
		{"metadata spacecraft is free", sandboxv1.CreateSandboxRequest{Metadata: map[string]string{"spacecraft": "x", "e2bish": "y"}}, ""},
		{"env E2B_SANDBOX_ID", sandboxv1.CreateSandboxRequest{Env: map[string]string{"E2B_SANDBOX_ID": "x"}}, "reserved for the platform"},
		{"env SPACE_TENANT_ID", sandboxv1.CreateSandboxRequest{Env: map[string]string{"SPACE_TENANT_ID": "x"}}, "reserved for the platform"},
		{"env own API keys are free", sandboxv1.CreateSandboxRequest{Env: map[string]string{"E2B_API_KEY": "k", "SPACE_API_KEY": "k", "SPACE_API_URL": "u"}}, ""},
		{"template upper", sandboxv1.CreateSandboxRequest{Template: "Base"}, "template name"},
		{"template slash", sandboxv1.CreateSandboxRequest{Template: "../etc"}, "template name"},
		{"template leading dot", sandboxv1.CreateSandboxRequest{Template: ".hidden"}, "template name"},
		{"template long", sandboxv1.CreateSandboxRequest{Template: strings.Repeat("a", 64)}, "template name"},
		{"runtime", sandboxv1.CreateSandboxRequest{Runtime: "docker"}, "runtime"},
		{"name control", sandboxv1.CreateSandboxRequest{Name: "a\nb"}, "name"},
		{"name long", sandboxv1.CreateSandboxRequest{Name: strings.Repeat("a", MaxNameLen+1)}, "name"},
		{"cpus 0 is default", sandboxv1.CreateSandboxRequest{CPUs: 0}, ""},
		{"cpus negative", sandboxv1.CreateSandboxRequest{CPUs: -1}, "cpus"},
		{"cpus 17", sandboxv1.CreateSandboxRequest{CPUs: 17}, "cpus"},
		{"memory low", sandboxv1.CreateSandboxRequest{MemoryMiB: 63}, "memory_mib"},
		{"memory high", sandboxv1.CreateSandboxRequest{MemoryMiB: 65537}, "memory_mib"},
		{"disk low", sandboxv1.CreateSandboxRequest{DiskMiB: 1}, "disk_mib"},
		{"env empty key", sandboxv1.CreateSandboxRequest{Env: map[string]string{"": "v"}}, "empty variable"},
		{"env = in key", sandboxv1.CreateSandboxRequest{Env: map[string]string{"A=B": "v"}}, "'='"},
		{"env NUL in key", sandboxv1.CreateSandboxRequest{Env: map[string]string{"A\x00": "v"}}, "NUL"},
		{"env NUL in value", sandboxv1.CreateSandboxRequest{Env: map[string]string{"A": "v\x00"}}, "NUL"},
		{"env = in value ok", sandboxv1.CreateSandboxRequest{Env: map[string]string{"A": "b=c"}}, ""},
		{"env value long", sandboxv1.CreateSandboxRequest{Env: map[string]string{"A": big + "x"}}, "value longer"},
		{"env too many", sandboxv1.CreateSandboxRequest{Env: manyEnv}, "more than"},
		{"env total", sandboxv1.CreateSandboxRequest{Env: tooMuchEnv}, "in total"},
		{"metadata key empty", sandboxv1.CreateSandboxRequest{Metadata: map[string]string{"": "v"}}, "metadata key"},
		{"metadata bad utf8", sandboxv1.CreateSandboxRequest{Metadata: map[string]string{"k": "\xff"}}, "UTF-8"},
		{"timeout garbage", sandboxv1.CreateSandboxRequest{Timeout: "soon"}, "timeout"},
		{"timeout negative", sandboxv1.CreateSandboxRequest{Timeout: "-1s"}, "timeout"},
		{"timeout zero", sandboxv1.CreateSandboxRequest{Timeout: "0s"}, "timeout"},
		{"timeout huge", sandboxv1.CreateSandboxRequest{Timeout: "9000h"}, "timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ValidateCreate(tc.req)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateCreate: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ValidateCreate: %v, want error containing %q", err, tc.wantErr)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %v is not ErrInvalidArgument", err)
			}
		})
	}
}

func TestParseTimeout(t *testing.T) {
	if d, err := ParseTimeout("90s"); err != nil || d != 90*time.Second {
		t.Errorf("ParseTimeout(90s) = %v, %v", d, err)
	}
	if d, err := ParseTimeout(""); err != nil || d != 0 {
		t.Errorf("ParseTimeout(\"\") = %v, %v", d, err)
	}
}

// FuzzValidateCreate checks that whatever ValidateCreate accepts stays inside
// the documented bounds and that it never panics.
func FuzzValidateCreate(f *testing.F) {
	f.Add("base", "ns", "n", 1, 512, 2048, "K", "V", "30m")
	f.Add("", "", "", 0, 0, 0, "", "", "")
	f.Add("a..b", "vm", "\x00", -5, 1<<40, 7, "A=B", "\x00", "-1h")
	f.Fuzz(func(t *testing.T, tpl, rt, name string, cpus, mem, disk int, k, v, timeout string) {
		spec, err := ValidateCreate(sandboxv1.CreateSandboxRequest{
			Template: tpl, Runtime: rt, Name: name, CPUs: cpus, MemoryMiB: mem, DiskMiB: disk,
			Env: map[string]string{k: v}, Timeout: timeout,
		})
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not ErrInvalidArgument", err)
			}
			return
		}
		if ValidateTemplateName(spec.Template) != nil || spec.CPUs < MinCPUs || spec.CPUs > MaxCPUs ||
			spec.MemoryMiB < MinMemoryMiB || spec.MemoryMiB > MaxMemoryMiB || spec.DiskMiB < MinDiskMiB ||
			spec.DiskMiB > MaxDiskMiB || spec.Timeout < 0 || spec.Timeout > MaxTimeout {
			t.Fatalf("accepted out-of-bounds spec %+v", spec)
		}
		if strings.ContainsAny(k, "=\x00") || k == "" || strings.IndexByte(v, 0) >= 0 {
			t.Fatalf("accepted env %q=%q", k, v)
		}
	})
}

// TestParseIdleActions: every idle action parses, the default is a pause,
// and only pause and hibernate are undone by the next request.
func TestParseIdleActions(t *testing.T) {
	for _, tc := range []struct {
		action, want string
		op           Op
		wakes        bool
	}{
		{"", IdlePause, OpPause, true},
		{IdlePause, IdlePause, OpPause, true},
		{IdleHibernate, IdleHibernate, OpHibernate, true},
		{IdlePauseHeld, IdlePauseHeld, OpPause, false},
		{IdleStop, IdleStop, OpStop, false},
	} {
		d, got, err := ParseIdle("90s", tc.action)
		if err != nil || d != 90*time.Second || got != tc.want {
			t.Errorf("ParseIdle(90s, %q) = %s, %q, %v; want 90s, %q", tc.action, d, got, err, tc.want)
		}
		if op := IdleOp(got); op != tc.op {
			t.Errorf("IdleOp(%q) = %s, want %s", got, op, tc.op)
		}
		if w := IdleWakes(got); w != tc.wakes {
			t.Errorf("IdleWakes(%q) = %v, want %v", got, w, tc.wakes)
		}
	}
	if _, _, err := ParseIdle("90s", "delete"); err == nil || !strings.Contains(err.Error(), "want pause, hibernate, pause-held or stop") {
		t.Errorf("ParseIdle(90s, delete) = %v, want the actions listed", err)
	}
}
