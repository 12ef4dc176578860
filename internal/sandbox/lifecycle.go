package sandbox

// The sandbox lifecycle (ARCHITECTURE.md §4), as data.
//
//	                           create
//	                 (none) ----------> creating
//	                                       :
//	                                       v
//	     resuming .....................> running <...................... restoring
//	        ^                          /    |    \                       ^       ^
//	        |                   pause /     |     \ stop                 |       |
//	 resume |                        v      |      v                     |       |
//	        |                  pausing      |      stopping              |       |
//	        |                     :         |         :                  |       |
//	        |                     v         |         v          start   |       |
//	        +------------------ paused      |      stopped --------------+       |
//	                              |   \     | hibernate                          |
//	                              |    \    v                                    |
//	                         stop |     hibernating ........> hibernated --------+
//	                              v   hibernate                     restore, resume
//	                          (stopping)
//
//	  ---op--->  an operation starts (Apply)
//	  .......>   the operation's work finished (Settled)
//
//	any state but deleted  --delete-->   deleting ....> deleted
//	any state with work    --fail-->     failed
//	running, paused, failed --recover--> recovering  (crash recovery: new execution)
//	running, paused, stopped, hibernated, failed --rollback--> restoring
//	snapshot and fork leave the source sandbox in the state it is in.
//
// Every state a sandbox enters through creating or restoring is a new
// execution (ARCHITECTURE.md §3): generation+1, a new execution id. A pause and
// resume on the same node keeps the execution.
//
// Repeating an operation that is already under way, or whose result already
// holds, is legal and changes nothing (pause on pausing or paused), so a client
// or the reconciler can re-drive an operation after a crash without a 409.

import (
	"fmt"

	"github.com/spacesandbox/space/internal/errdefs"
)

// State is where a sandbox is in its lifecycle. The values are the ones the
// REST API reports (sandboxv1.State).
type State string

// The lifecycle states. StateNone is the state before create.
const (
	StateNone        State = ""
	StateCreating    State = "creating"
	StateRunning     State = "running"
	StatePausing     State = "pausing"
	StatePaused      State = "paused"
	StateResuming    State = "resuming"
	StateHibernating State = "hibernating"
	StateHibernated  State = "hibernated"
	StateRestoring   State = "restoring"
	StateRecovering  State = "recovering"
	StateStopping    State = "stopping"
	StateStopped     State = "stopped"
	StateDeleting    State = "deleting"
	StateDeleted     State = "deleted"
	StateFailed      State = "failed"
)

// Op is an operation on a sandbox's lifecycle.
type Op string

// The lifecycle operations. OpRecover is crash recovery (a new execution from
// the latest snapshot); OpFail records that the current execution failed.
const (
	OpCreate    Op = "create"
	OpPause     Op = "pause"
	OpResume    Op = "resume"
	OpHibernate Op = "hibernate"
	OpRestore   Op = "restore"
	OpStop      Op = "stop"
	OpStart     Op = "start"
	OpDelete    Op = "delete"
	OpFork      Op = "fork"
	OpRollback  Op = "rollback"
	OpSnapshot  Op = "snapshot"
	OpRecover   Op = "recover"
	OpFail      Op = "fail"
)

// States lists every lifecycle state except StateNone, in diagram order.
var States = []State{
	StateCreating, StateRunning, StatePausing, StatePaused, StateResuming,
	StateHibernating, StateHibernated, StateRestoring, StateRecovering, StateStopping,
	StateStopped, StateDeleting, StateDeleted, StateFailed,
}

// Ops lists every lifecycle operation.
var Ops = []Op{
	OpCreate, OpPause, OpResume, OpHibernate, OpRestore, OpStop, OpStart,
	OpDelete, OpFork, OpRollback, OpSnapshot, OpRecover, OpFail,
}

// transitions is the lifecycle: transitions[from][op] is the state op moves a
// sandbox to. A missing entry is an illegal transition.
var transitions = map[State]map[Op]State{
	StateNone: {
		OpCreate: StateCreating,
	},
	StateCreating: {
		OpDelete: StateDeleting,
		OpFail:   StateFailed,
	},
	StateRunning: {
		OpPause:     StatePausing,
		OpResume:    StateRunning,
		OpRestore:   StateRunning,
		OpStart:     StateRunning,
		OpHibernate: StateHibernating,
		OpStop:      StateStopping,
		OpDelete:    StateDeleting,
		OpFork:      StateRunning,
		OpSnapshot:  StateRunning,
		OpRollback:  StateRestoring,
		OpRecover:   StateRecovering,
		OpFail:      StateFailed,
	},
	StatePausing: {
		OpPause:  StatePausing,
		OpDelete: StateDeleting,
		OpFail:   StateFailed,
	},
	StatePaused: {
		OpPause:     StatePaused,
		OpResume:    StateResuming,
		OpHibernate: StateHibernating,
		OpStop:      StateStopping,
		OpDelete:    StateDeleting,
		OpFork:      StatePaused,
		OpSnapshot:  StatePaused,
		OpRollback:  StateRestoring,
		OpRecover:   StateRecovering,
		OpFail:      StateFailed,
	},
	StateResuming: {
		OpResume: StateResuming,
		OpDelete: StateDeleting,
		OpFail:   StateFailed,
	},
	StateHibernating: {
		OpHibernate: StateHibernating,
		OpDelete:    StateDeleting,
		OpFail:      StateFailed,
	},
	StateHibernated: {
		OpHibernate: StateHibernated,
		OpRestore:   StateRestoring,
		OpResume:    StateRestoring,
		OpDelete:    StateDeleting,
		OpFork:      StateHibernated,
		OpRollback:  StateRestoring,
	},
	StateRestoring: {
		OpRestore: StateRestoring,
		OpResume:  StateRestoring,
		OpStart:   StateRestoring,
		OpRecover: StateRecovering,
		OpDelete:  StateDeleting,
		OpFail:    StateFailed,
	},
	StateRecovering: {
		OpRecover: StateRecovering,
		OpResume:  StateRecovering,
		OpDelete:  StateDeleting,
		OpFail:    StateFailed,
	},
	StateStopping: {
		OpStop:   StateStopping,
		OpDelete: StateDeleting,
		OpFail:   StateFailed,
	},
	StateStopped: {
		OpStop:     StateStopped,
		OpStart:    StateRestoring,
		OpDelete:   StateDeleting,
		OpFork:     StateStopped,
		OpSnapshot: StateStopped,
		OpRollback: StateRestoring,
	},
	StateDeleting: {
		OpDelete: StateDeleting,
	},
	StateDeleted: {
		OpDelete: StateDeleted,
	},
	StateFailed: {
		OpDelete:   StateDeleting,
		OpRecover:  StateRecovering,
		OpRollback: StateRestoring,
		OpFail:     StateFailed,
	},
}

// settled maps each transitional state to the state it reaches when its work
// finishes. States not listed are stable.
var settled = map[State]State{
	StateCreating:    StateRunning,
	StatePausing:     StatePaused,
	StateResuming:    StateRunning,
	StateHibernating: StateHibernated,
	StateRestoring:   StateRunning,
	StateRecovering:  StateRunning,
	StateStopping:    StateStopped,
	StateDeleting:    StateDeleted,
}

// IllegalTransitionError is returned by Apply when op is not allowed in State.
// It is of class errdefs.ErrConflict (HTTP 409), and its message names the
// current state as SPEC.md requires.
type IllegalTransitionError struct {
	State State
	Op    Op
}

// Error implements error.
func (e *IllegalTransitionError) Error() string {
	state := e.State
	if state == StateNone {
		state = "(none)"
	}
	return fmt.Sprintf("cannot %s a sandbox that is %s", e.Op, state)
}

// Unwrap makes errors.Is(err, errdefs.ErrConflict) true.
func (e *IllegalTransitionError) Unwrap() error { return errdefs.ErrConflict }

// Apply returns the state op moves a sandbox in state from to, or an
// *IllegalTransitionError when the lifecycle does not allow it.
func Apply(from State, op Op) (State, error) {
	to, ok := transitions[from][op]
	if !ok {
		return from, &IllegalTransitionError{State: from, Op: op}
	}
	return to, nil
}

// Settled returns the state s reaches once its work finishes: running for
// creating, paused for pausing, and so on. A stable state is its own result.
func Settled(s State) State {
	if to, ok := settled[s]; ok {
		return to
	}
	return s
}

// startsExecution reports whether entering s starts an execution.
func (s State) startsExecution() bool {
	return s == StateCreating || s == StateRestoring || s == StateRecovering
}

// Transitional reports whether s is a state in which work is under way.
func (s State) Transitional() bool {
	_, ok := settled[s]
	return ok
}

// Valid reports whether s is one of the lifecycle states (StateNone is not).
func (s State) Valid() bool {
	_, ok := transitions[s]
	return ok && s != StateNone
}

// Valid reports whether o is one of the lifecycle operations.
func (o Op) Valid() bool {
	for _, known := range Ops {
		if o == known {
			return true
		}
	}
	return false
}

// StartsExecution reports whether moving from one state to another starts a
// new execution of the sandbox (generation+1): entering creating or restoring
// does, staying in them (a repeated operation) does not.
func StartsExecution(from, to State) bool {
	return from != to && (to == StateCreating || to == StateRestoring || to == StateRecovering) &&
		!(from.startsExecution() && to.startsExecution())
}
