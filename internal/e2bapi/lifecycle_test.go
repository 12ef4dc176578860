package e2bapi

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// TestE2BLifecycleOf: each lifecycle an E2B create can ask for maps to the
// idle handling that gives it, and the combinations E2B refuses are
// refused with a message naming the field.
func TestE2BLifecycleOf(t *testing.T) {
	yes, no := true, false
	on := &struct {
		Enabled bool `json:"enabled"`
	}{Enabled: true}
	off := &struct {
		Enabled bool `json:"enabled"`
	}{}
	const ttl = 30 * time.Second
	for _, tc := range []struct {
		name    string
		req     e2bNewSandbox
		ttl     time.Duration
		want    e2bIdle
		wantErr string
	}{
		{name: "kill (default)", req: e2bNewSandbox{}},
		{name: "kill", req: e2bNewSandbox{AutoPause: &no, AutoResume: off}},
		{name: "pause", req: e2bNewSandbox{AutoPause: &yes}, want: e2bIdle{ttl, sandbox.IdlePauseHeld}},
		{name: "pause, autoResume false", req: e2bNewSandbox{AutoPause: &yes, AutoResume: off}, want: e2bIdle{ttl, sandbox.IdlePauseHeld}},
		{name: "pause, autoResume", req: e2bNewSandbox{AutoPause: &yes, AutoResume: on}, want: e2bIdle{ttl, sandbox.IdlePause}},
		{name: "pause keeping memory", req: e2bNewSandbox{AutoPause: &yes, AutoPauseMemory: &yes, AutoResume: on}, want: e2bIdle{ttl, sandbox.IdlePause}},
		{name: "pause without memory", req: e2bNewSandbox{AutoPause: &yes, AutoPauseMemory: &no}, want: e2bIdle{ttl, sandbox.IdleStop}},
		{name: "autoResume without pause", req: e2bNewSandbox{AutoResume: on}, wantErr: "autoResume needs lifecycle.onTimeout"},
		{name: "autoResume with kill", req: e2bNewSandbox{AutoPause: &no, AutoResume: on}, wantErr: "autoResume needs lifecycle.onTimeout"},
		{name: "keepMemory without pause", req: e2bNewSandbox{AutoPauseMemory: &no}, wantErr: "autoPauseMemory (onTimeout.keepMemory) needs"},
		{name: "autoResume without memory", req: e2bNewSandbox{AutoPause: &yes, AutoPauseMemory: &no, AutoResume: on}, wantErr: "resumed only by Sandbox.connect"},
		{name: "timeout below the idle minimum", req: e2bNewSandbox{AutoPause: &yes}, ttl: 500 * time.Millisecond, wantErr: "needs at least 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.ttl
			if d == 0 {
				d = ttl
			}
			got, err := e2bLifecycleOf(&tc.req, d)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("err = %v, want an invalid argument containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("= %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestE2BLifecycleInfo: getInfo's lifecycle and endAt say what the
// sandbox's idle handling does.
func TestE2BLifecycleInfo(t *testing.T) {
	now := time.Now().UTC()
	for _, tc := range []struct {
		name string
		sb   sandbox.Sandbox
		want e2bLifecycle
		end  time.Time
	}{
		{"killed at its timeout", sandbox.Sandbox{ExpiresAt: now.Add(time.Hour), UpdatedAt: now}, e2bLifecycle{OnTimeout: "kill"}, now.Add(time.Hour)},
		{"no timeout", sandbox.Sandbox{UpdatedAt: now}, e2bLifecycle{OnTimeout: "kill"}, e2bNoEnd},
		{"autoResume", sandbox.Sandbox{IdleTimeout: time.Minute, IdleAction: sandbox.IdlePause, UpdatedAt: now}, e2bLifecycle{OnTimeout: "pause", AutoResume: true}, now.Add(time.Minute)},
		{"hibernate (SPACE's idle)", sandbox.Sandbox{IdleTimeout: time.Minute, IdleAction: sandbox.IdleHibernate, UpdatedAt: now}, e2bLifecycle{OnTimeout: "pause", AutoResume: true}, now.Add(time.Minute)},
		{"held", sandbox.Sandbox{IdleTimeout: time.Minute, IdleAction: sandbox.IdlePauseHeld, UpdatedAt: now}, e2bLifecycle{OnTimeout: "pause"}, now.Add(time.Minute)},
		{"without memory", sandbox.Sandbox{IdleTimeout: time.Minute, IdleAction: sandbox.IdleStop, UpdatedAt: now}, e2bLifecycle{OnTimeout: "pause"}, now.Add(time.Minute)},
		// SPACE's own idle timeout beside a timeout: deleted at the timeout.
		{"idle and a timeout", sandbox.Sandbox{IdleTimeout: time.Minute, IdleAction: sandbox.IdlePause, ExpiresAt: now.Add(time.Hour), UpdatedAt: now}, e2bLifecycle{OnTimeout: "kill", AutoResume: true}, now.Add(time.Hour)},
	} {
		if got := e2bLifecycleInfo(&tc.sb); got != tc.want {
			t.Errorf("%s: lifecycle = %+v, want %+v", tc.name, got, tc.want)
		}
		if got := e2bEndAtOf(&tc.sb); !got.Equal(tc.end) {
			t.Errorf("%s: endAt = %s, want %s", tc.name, got, tc.end)
		}
	}
}
