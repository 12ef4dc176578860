package service

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// The sequential model of TestConcurrentLifecycle: a batch of operations
// that ran at once is linearizable when some order of them, with the
// reconciler's work (settling a transitional state) between any two, gives
// every operation the outcome it got and ends in the state the sandbox
// reached. The lifecycle table (sandbox.Apply) is the model's transition
// function; what is under test is that concurrency never leaves it.

// raceOp is one operation of a batch.
type raceOp string

// The operations the model knows. ttl sets a timeout that expires at once
// (the reconciler deletes the sandbox when it next settles).
const (
	racePause     raceOp = "pause"
	raceResume    raceOp = "resume"
	raceStop      raceOp = "stop"
	raceStart     raceOp = "start"
	raceRollback  raceOp = "rollback"
	raceSnapshot  raceOp = "snapshot"
	raceDelete    raceOp = "delete"
	raceTTL       raceOp = "ttl"
	raceFork      raceOp = "fork"
	raceHibernate raceOp = "hibernate"
	raceRestore   raceOp = "restore"
)

var raceOps = []raceOp{racePause, raceResume, raceStop, raceStart, raceRollback, raceSnapshot, raceDelete, raceTTL, raceFork, raceHibernate, raceRestore}

// outcome is how an operation answered.
type outcome string

const (
	// done: it succeeded (the sandbox reached the operation's result).
	done outcome = "ok"
	// refused: a conflict (an illegal transition, a sandbox in the wrong
	// state), nothing applied.
	refused outcome = "conflict"
	// overtaken: accepted, then another operation moved the sandbox before
	// it settled (FailedPrecondition "did not complete", a failed snapshot).
	overtaken outcome = "overtaken"
	// gone: NotFound, the sandbox was deleted before or while it ran.
	gone outcome = "gone"
	// other: any other error, which no order explains.
	other outcome = "other"
)

// classify maps an operation's error to its outcome.
func classify(err error) outcome {
	switch {
	case err == nil:
		return done
	case errors.As(err, new(*sandbox.IllegalTransitionError)), errors.Is(err, errdefs.ErrConflict):
		return refused
	case errors.Is(err, errdefs.ErrNotFound):
		return gone
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return overtaken
	}
	return other
}

// modelSandbox is the part of a sandbox the model follows.
type modelSandbox struct {
	State      sandbox.State
	Generation uint64
	// StartFrom: the sandbox has a snapshot its execution starts from
	// (a start on a running sandbox needs one).
	StartFrom bool
	// Expiring: a timeout was set; the reconciler deletes the sandbox when
	// it next settles.
	Expiring bool
}

func (m modelSandbox) String() string {
	s := fmt.Sprintf("%s g%d", m.State, m.Generation)
	if m.Expiring {
		s += " expiring"
	}
	return s
}

// settle is one step of the reconciler's work: a transitional state
// reaches its result; a settled sandbox whose timeout passed starts
// deleting.
func (m modelSandbox) settle() modelSandbox {
	switch {
	case m.State == sandbox.StateStopping, m.State == sandbox.StateHibernating:
		// Both keep the sandbox in a snapshot its next start begins from.
		m.StartFrom = true
		m.State = sandbox.Settled(m.State)
	case m.State.Transitional():
		m.State = sandbox.Settled(m.State)
	case m.Expiring && m.State != sandbox.StateDeleted:
		m.State = sandbox.StateDeleting
	}
	return m
}

// settled is the reconciler's work done: m settled until nothing changes.
func (m modelSandbox) settled() modelSandbox {
	for next := m.settle(); next != m; next = m.settle() {
		m = next
	}
	return m
}

// step applies op to m: the sandbox after it, whether it was accepted,
// and the outcome it has if nothing else moves the sandbox before it
// settles (acceptedOutcome) or when its refusal is final.
func (m modelSandbox) step(op raceOp) (next modelSandbox, accepted bool, final outcome) {
	if m.State == sandbox.StateDeleted {
		return m, false, gone
	}
	switch op {
	case raceSnapshot, raceFork:
		// Both take a snapshot of the sandbox (a fork then starts a new
		// sandbox from it) and leave it as it is.
		if m.State != sandbox.StateRunning && m.State != sandbox.StatePaused {
			return m, false, refused
		}
		return m, true, done
	case raceTTL:
		if m.State == sandbox.StateDeleting {
			return m, false, refused
		}
		m.Expiring = true
		return m, true, done
	}
	from := m.State
	to, err := sandbox.Apply(from, sandbox.Op(op))
	if err != nil {
		return m, false, refused
	}
	if op == raceStart && !m.StartFrom && !from.Transitional() && to == from {
		// A start on a running sandbox with nothing to start from.
		return m, false, overtaken
	}
	if sandbox.StartsExecution(from, to) {
		m.Generation++
	}
	if op == raceStart || op == raceRollback {
		m.StartFrom = true
	}
	m.State = to
	return m, true, done
}

// allowed reports whether an operation's observed outcome is one the model
// gives it in a trace: modelled is its outcome there when refused;
// overtakenFirst says a later step moved the sandbox before its result
// settled; moved says something moved it after it at all (a later step, or
// the expiry of a timeout), so a waiter that looked late saw the move.
func allowed(got, modelled outcome, accepted, overtakenFirst, moved bool) bool {
	switch {
	case got == other:
		return false
	case !accepted:
		return got == modelled
	case got == done:
		return !overtakenFirst
	default:
		return (got == overtaken || got == gone) && moved
	}
}

// explain searches for a sequential order of ops (with settling between
// any two) that gives each op its observed outcome and ends in want. It
// returns the order found, or "" and false.
func explain(start modelSandbox, ops []raceOp, got []outcome, want modelSandbox) (string, bool) {
	used := make([]bool, len(ops))
	type traced struct {
		i        int
		accepted bool
		modelled outcome
		state    sandbox.State
		// settledFirst: the reconciler settled the sandbox just before.
		settledFirst bool
	}
	var trace []traced
	var found string
	var search func(m modelSandbox) bool
	search = func(m modelSandbox) bool {
		if len(trace) == len(ops) {
			final := m.settled()
			if final.State != want.State || (final.State != sandbox.StateDeleted && final.Generation != want.Generation) {
				return false
			}
			for k, tr := range trace {
				overtakenFirst, moved := false, final.State != sandbox.Settled(tr.state)
				settled := !tr.state.Transitional()
				for _, later := range trace[k+1:] {
					settled = settled || later.settledFirst
					if later.accepted && later.state != tr.state {
						moved = true
						overtakenFirst = overtakenFirst || !settled
					}
				}
				if !allowed(got[tr.i], tr.modelled, tr.accepted, overtakenFirst, moved) {
					return false
				}
			}
			var b strings.Builder
			for _, tr := range trace {
				fmt.Fprintf(&b, "%s→%s ", ops[tr.i], tr.state)
			}
			found = strings.TrimSpace(b.String())
			return true
		}
		for i, op := range ops {
			if used[i] {
				continue
			}
			for settles := range 3 {
				before := m
				for range settles {
					before = before.settle()
				}
				if settles > 0 && before == m || settles > 1 && before == m.settle() {
					continue // the same as fewer settles
				}
				settleFirst := settles > 0
				next, accepted, modelled := before.step(op)
				used[i] = true
				trace = append(trace, traced{i: i, accepted: accepted, modelled: modelled, state: next.State, settledFirst: settleFirst})
				ok := search(next)
				trace = trace[:len(trace)-1]
				used[i] = false
				if ok {
					return true
				}
			}
		}
		return false
	}
	if search(start) {
		return found, true
	}
	return "", false
}
