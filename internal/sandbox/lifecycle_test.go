package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// legal is every legal transition, written out independently of the table in
// lifecycle.go: "from op to". Every (state, op) pair not listed must be refused.
var legal = []string{
	"none create creating",

	"creating delete deleting",
	"creating fail failed",

	"running pause pausing",
	"running resume running",
	"running restore running",
	"running start running",
	"running hibernate hibernating",
	"running stop stopping",
	"running delete deleting",
	"running fork running",
	"running snapshot running",
	"running rollback restoring",
	"running recover recovering",
	"running fail failed",

	"pausing pause pausing",
	"pausing delete deleting",
	"pausing fail failed",

	"paused pause paused",
	"paused resume resuming",
	"paused hibernate hibernating",
	"paused stop stopping",
	"paused delete deleting",
	"paused fork paused",
	"paused snapshot paused",
	"paused rollback restoring",
	"paused recover recovering",
	"paused fail failed",

	"resuming resume resuming",
	"resuming delete deleting",
	"resuming fail failed",

	"hibernating hibernate hibernating",
	"hibernating delete deleting",
	"hibernating fail failed",

	"hibernated hibernate hibernated",
	"hibernated restore restoring",
	"hibernated resume restoring",
	"hibernated delete deleting",
	"hibernated fork hibernated",
	"hibernated rollback restoring",

	"restoring restore restoring",
	"restoring resume restoring",
	"restoring start restoring",
	"restoring recover recovering",
	"restoring delete deleting",
	"restoring fail failed",

	"stopping stop stopping",
	"stopping delete deleting",
	"stopping fail failed",

	"stopped stop stopped",
	"stopped start restoring",
	"stopped delete deleting",
	"stopped fork stopped",
	"stopped snapshot stopped",
	"stopped rollback restoring",

	"deleting delete deleting",

	"deleted delete deleted",

	"failed delete deleting",
	"failed recover recovering",
	"recovering recover recovering",
	"recovering resume recovering",
	"recovering delete deleting",
	"recovering fail failed",
	"failed rollback restoring",
	"failed fail failed",
}

func parseState(s string) State {
	if s == "none" {
		return StateNone
	}
	return State(s)
}

func TestApplyEveryPair(t *testing.T) {
	want := map[State]map[Op]State{}
	for _, line := range legal {
		f := strings.Fields(line)
		from, op, to := parseState(f[0]), Op(f[1]), parseState(f[2])
		if want[from] == nil {
			want[from] = map[Op]State{}
		}
		want[from][op] = to
	}
	for _, from := range append([]State{StateNone}, States...) {
		for _, op := range Ops {
			name := string(from) + "/" + string(op)
			if from == StateNone {
				name = "none/" + string(op)
			}
			t.Run(name, func(t *testing.T) {
				got, err := Apply(from, op)
				wantTo, ok := want[from][op]
				if ok {
					if err != nil || got != wantTo {
						t.Fatalf("Apply(%q, %q) = %q, %v; want %q, nil", from, op, got, err, wantTo)
					}
					return
				}
				checkIllegal(t, from, op, got, err)
			})
		}
	}
}

func checkIllegal(t *testing.T, from State, op Op, got State, err error) {
	t.Helper()
	var ite *IllegalTransitionError
	if !errors.As(err, &ite) {
		t.Fatalf("Apply(%q, %q) = %q, %v; want *IllegalTransitionError", from, op, got, err)
	}
	if ite.State != from || ite.Op != op {
		t.Errorf("error = {%q, %q}, want {%q, %q}", ite.State, ite.Op, from, op)
	}
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("errors.Is(%v, ErrConflict) = false, want true", err)
	}
	if from != StateNone && !strings.Contains(err.Error(), string(from)) {
		t.Errorf("message %q does not name the current state %q", err, from)
	}
	if got != from {
		t.Errorf("illegal Apply returned state %q, want unchanged %q", got, from)
	}
}

func TestApplyUnknown(t *testing.T) {
	for _, tc := range []struct {
		from State
		op   Op
	}{
		{"bogus", OpDelete},
		{StateRunning, "explode"},
		{StateRunning, ""},
	} {
		got, err := Apply(tc.from, tc.op)
		checkIllegal(t, tc.from, tc.op, got, err)
	}
}

func TestSettled(t *testing.T) {
	want := map[State]State{
		StateCreating:    StateRunning,
		StateRunning:     StateRunning,
		StatePausing:     StatePaused,
		StatePaused:      StatePaused,
		StateResuming:    StateRunning,
		StateHibernating: StateHibernated,
		StateHibernated:  StateHibernated,
		StateRestoring:   StateRunning,
		StateRecovering:  StateRunning,
		StateStopping:    StateStopped,
		StateStopped:     StateStopped,
		StateDeleting:    StateDeleted,
		StateDeleted:     StateDeleted,
		StateFailed:      StateFailed,
	}
	for _, s := range States {
		if got := Settled(s); got != want[s] {
			t.Errorf("Settled(%q) = %q, want %q", s, got, want[s])
		}
		if got, wantT := s.Transitional(), Settled(s) != s; got != wantT {
			t.Errorf("%q.Transitional() = %v, want %v", s, got, wantT)
		}
		if !s.Valid() {
			t.Errorf("%q.Valid() = false", s)
		}
		// Every settled state must itself be stable.
		if Settled(Settled(s)) != Settled(s) {
			t.Errorf("Settled(%q) = %q is not stable", s, Settled(s))
		}
	}
	if StateNone.Valid() || State("bogus").Valid() {
		t.Error("StateNone or an unknown state reported valid")
	}
}

// TestEveryStateReachable walks the table from StateNone and checks that every
// state can be reached and that deleted is reachable from every state but
// itself through legal operations and settling.
func TestEveryStateReachable(t *testing.T) {
	next := func(s State) []State {
		var out []State
		for _, op := range Ops {
			if to, err := Apply(s, op); err == nil {
				out = append(out, to)
			}
		}
		return append(out, Settled(s))
	}
	reach := func(from State) map[State]bool {
		seen := map[State]bool{from: true}
		queue := []State{from}
		for len(queue) > 0 {
			s := queue[0]
			queue = queue[1:]
			for _, to := range next(s) {
				if !seen[to] {
					seen[to] = true
					queue = append(queue, to)
				}
			}
		}
		return seen
	}
	fromNone := reach(StateNone)
	for _, s := range States {
		if !fromNone[s] {
			t.Errorf("state %q is unreachable from none", s)
		}
		if !reach(s)[StateDeleted] {
			t.Errorf("deleted is unreachable from %q", s)
		}
	}
}

func TestStartsExecution(t *testing.T) {
	for _, tc := range []struct {
		from, to State
		want     bool
	}{
		{StateNone, StateCreating, true},
		{StateStopped, StateRestoring, true},
		{StateFailed, StateRestoring, true},
		{StateRestoring, StateRestoring, false},
		{StatePaused, StateResuming, false},
		{StateRunning, StatePausing, false},
	} {
		if got := StartsExecution(tc.from, tc.to); got != tc.want {
			t.Errorf("StartsExecution(%q, %q) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestOpValid(t *testing.T) {
	for _, op := range Ops {
		if !op.Valid() {
			t.Errorf("%q.Valid() = false", op)
		}
	}
	if Op("explode").Valid() {
		t.Error(`Op("explode").Valid() = true`)
	}
}
