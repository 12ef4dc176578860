package e2bapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// E2B's lifecycle on SPACE's idle handling. A sandbox created with
// lifecycle.onTimeout "pause" is not deleted at its timeout: it has no
// SPACE timeout, and its E2B timeout is its idle timeout, so it rests
// after that long without a request (a request, or a setTimeout, counts
// the time again from now):
//
//   - autoResume true: idle action "pause" (memory kept), and the next
//     request (envd traffic, a port) resumes it, as SPACE's idle pause;
//   - autoResume false (E2B's default): "pause-held", paused and left so
//     until Sandbox.connect resumes it;
//   - onTimeout {action: "pause", keepMemory: false}: "stop", its disk
//     kept and its memory not; connect starts it again (E2B's SDK refuses
//     autoResume with it).
//
// pause({keepMemory: false}) is SPACE's stop, and connect of a stopped
// sandbox its start; connect with onResume "reboot" (memory false) of a
// paused one resumes, stops and starts it from its disk.

// e2bIdle is the idle handling an E2B create asks for: zero for onTimeout
// "kill" (the timeout deletes it).
type e2bIdle struct {
	timeout time.Duration
	action  string
}

// e2bLifecycleOf checks the lifecycle fields of create req, whose
// timeout is ttl, and returns the idle handling they map to.
func e2bLifecycleOf(req *e2bNewSandbox, ttl time.Duration) (e2bIdle, error) {
	pause := req.AutoPause != nil && *req.AutoPause
	resume := req.AutoResume != nil && req.AutoResume.Enabled
	keepMemory := req.AutoPauseMemory == nil || *req.AutoPauseMemory
	switch {
	case !pause && resume:
		return e2bIdle{}, fmt.Errorf("%w: autoResume needs lifecycle.onTimeout \"pause\" (autoPause); a sandbox that is killed at its timeout has nothing to resume", errdefs.ErrInvalidArgument)
	case !pause && req.AutoPauseMemory != nil:
		return e2bIdle{}, fmt.Errorf("%w: autoPauseMemory (onTimeout.keepMemory) needs lifecycle.onTimeout \"pause\" (autoPause)", errdefs.ErrInvalidArgument)
	case !pause:
		return e2bIdle{}, nil
	case !keepMemory && resume:
		return e2bIdle{}, fmt.Errorf("%w: autoResume with onTimeout.keepMemory false: a sandbox paused without its memory is resumed only by Sandbox.connect", errdefs.ErrInvalidArgument)
	case ttl < sandbox.MinIdleTimeout:
		return e2bIdle{}, fmt.Errorf("%w: timeout %s: a sandbox that pauses at its timeout needs at least %s", errdefs.ErrInvalidArgument, ttl, sandbox.MinIdleTimeout)
	case !keepMemory:
		return e2bIdle{timeout: ttl, action: sandbox.IdleStop}, nil
	case resume:
		return e2bIdle{timeout: ttl, action: sandbox.IdlePause}, nil
	}
	return e2bIdle{timeout: ttl, action: sandbox.IdlePauseHeld}, nil
}

// e2bPausesOnTimeout reports whether sb is an E2B sandbox that pauses at
// its timeout: idle handling and no timeout of SPACE's own.
func e2bPausesOnTimeout(sb *sandbox.Sandbox) bool {
	return sb.IdleTimeout > 0 && sb.ExpiresAt.IsZero()
}

// e2bLifecycleInfo is SandboxDetail.lifecycle of sb: onTimeout is what
// its timeout does, autoResume whether a request wakes it once idle
// handling paused it (also for a sandbox made with SPACE's own idle
// timeout beside a timeout, which is deleted at that timeout).
func e2bLifecycleInfo(sb *sandbox.Sandbox) e2bLifecycle {
	l := e2bLifecycle{OnTimeout: "kill", AutoResume: sb.IdleTimeout > 0 && sandbox.IdleWakes(sb.IdleAction)}
	if e2bPausesOnTimeout(sb) {
		l.OnTimeout = "pause"
	}
	return l
}

// e2bEndAtOf is SandboxDetail.endAt of sb: its timeout, or for a sandbox
// that pauses at its timeout, when it pauses if no request comes first
// (its idle timeout from its last change; a request since only delays it).
func e2bEndAtOf(sb *sandbox.Sandbox) time.Time {
	if e2bPausesOnTimeout(sb) && !sb.UpdatedAt.IsZero() {
		return sb.UpdatedAt.Add(sb.IdleTimeout)
	}
	return e2bEndAt(sb)
}

// e2bSetTimeout gives sandbox id timeout ttl from now: its idle timeout
// when it pauses at its timeout, else SPACE's timeout (deletion).
func (a *API) e2bSetTimeout(ctx context.Context, c service.Caller, id string, ttl time.Duration) error {
	sb, err := a.svc.Get(ctx, c, id)
	if err != nil {
		return err
	}
	if e2bPausesOnTimeout(sb) {
		_, err = a.svc.SetIdle(ctx, c, id, ttl)
	} else {
		_, err = a.svc.SetTimeout(ctx, c, id, ttl)
	}
	return err
}

// e2bPauseWithoutMemory is pause({keepMemory: false}): SPACE's stop,
// which keeps the disk and ends the execution. 204 once stopped; 409 when
// it is paused (stopped, hibernated) already.
func (a *API) e2bPauseWithoutMemory(w http.ResponseWriter, r *http.Request, sb *sandbox.Sandbox) {
	// Already paused in any way is E2B's 409, as for a pause with memory:
	// never a stop of a paused VM, whose disk would lack the writes its
	// frozen guest still holds in its page cache.
	if e2bState(sb.State) == "paused" {
		a.writeE2BErr(w, r, fmt.Errorf("%w: sandbox %s is already %s", errdefs.ErrConflict, sb.ID, sb.State))
		return
	}
	_, err := a.svc.Lifecycle(r.Context(), a.host.Caller(r.Context()), sb.ID, sandbox.OpStop)
	if err != nil && !errors.Is(err, service.ErrStillWorking) {
		a.writeE2BErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bWake brings paused sandbox sb back for connect: resume (memory kept),
// or with reboot (onResume "reboot", memory false) a start from its disk
// alone. A sandbox paused or hibernated with its memory is resumed, then
// stopped, then started for a reboot: the stop of a frozen VM would keep a
// disk without the writes its guest still held in its page cache, which a
// running guest writes out when it is stopped (compat e2blife.mjs on vm).
// A stopped sandbox is always started from its disk, its memory being
// gone.
//
// A sandbox still pausing, hibernating or stopping (which E2B already
// calls paused) is waited for first, by joining the operation under way.
func (a *API) e2bWake(ctx context.Context, c service.Caller, sb *sandbox.Sandbox, reboot bool) error {
	joins := map[sandbox.State]sandbox.Op{sandbox.StatePausing: sandbox.OpPause, sandbox.StateStopping: sandbox.OpStop, sandbox.StateHibernating: sandbox.OpHibernate}
	if join := joins[sb.State]; join != "" {
		settled, err := a.svc.Lifecycle(ctx, c, sb.ID, join)
		if err != nil {
			return err
		}
		sb = settled
	}
	switch {
	case sb.State == sandbox.StateStopped:
	case reboot:
		for _, op := range []sandbox.Op{sandbox.OpResume, sandbox.OpStop} {
			if _, err := a.svc.Lifecycle(ctx, c, sb.ID, op); errors.Is(err, service.ErrStillWorking) {
				return fmt.Errorf("%w: sandbox %s: the %s of its reboot is still under way; connect again", errdefs.ErrUnavailable, sb.ID, op)
			} else if err != nil {
				return err
			}
		}
	default:
		_, err := a.svc.Lifecycle(ctx, c, sb.ID, sandbox.OpResume)
		if errors.Is(err, service.ErrStillWorking) {
			err = nil
		}
		return err
	}
	_, err := a.svc.Start(ctx, c, sb.ID)
	if errors.Is(err, service.ErrStillWorking) {
		err = nil
	}
	return err
}

// e2bConnectIdle applies connect's timeout (seconds) to sb, which pauses
// at its timeout: its idle timeout is only ever lengthened, as connect
// extends a timeout and never shortens it.
func (a *API) e2bConnectIdle(ctx context.Context, sb *sandbox.Sandbox, secs int64) error {
	ttl, err := e2bSeconds(secs)
	if err != nil || ttl <= sb.IdleTimeout {
		return err
	}
	_, err = a.svc.SetIdle(ctx, a.host.Caller(ctx), sb.ID, ttl)
	return err
}
