// Package failpoint provides named crash points compiled into the real
// binaries: each is inert unless the process's environment arms it, and a
// disarmed point costs one atomic load. Tests arm a point to make the
// process die exactly at one step of an operation ("at every step, not a
// sample"), then restart it and check what the crash left.
//
// SPACE_FAILPOINTS is a comma-separated list of NAME=ACTION[@N]: ACTION is
// exit (os.Exit(137): no deferred function runs, nothing is flushed — the
// effect of kill -9 at that line), N the hit that fires (default 1: the
// first). A name no point has is an error at start, so a typo cannot
// silently disarm a test:
//
//	SPACE_FAILPOINTS=hibernate/after-parts=exit space server --dev
//
// Every point is declared in points.go (the registry): All lists them, and
// the e2e crash test iterates them.
package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/spacesandbox/space/internal/errdefs"
)

// EnvVar is the environment variable that arms points.
const EnvVar = "SPACE_FAILPOINTS"

// ExitCode is the status a process armed with the exit action dies with,
// the shell's status of a process killed by SIGKILL (128+9).
const ExitCode = 137

// Point is one named step at which a process can be made to die.
type Point struct {
	// Name is the point's name in SPACE_FAILPOINTS, "operation/step".
	Name string
	// Op is the user operation whose work passes the point (create,
	// hibernate, restore, snapshot, fork, delete, pause, resume, stop;
	// template: a template build).
	Op string
	// Doc says where the point is: what is done and what is not yet.
	Doc string
	// Process is the process that hits the point.
	Process Process
	// Runtime is the one runtime whose executions pass the point ("vm":
	// a guest freeze), "" when every runtime's do.
	Runtime string

	// fireAt is the hit that fires (0: disarmed); hits counts them.
	fireAt atomic.Int64
	hits   atomic.Int64
}

// registry holds every point, in declaration order; it is filled by the
// package-level declarations of points.go and never changes afterwards.
var registry []*Point

// Process names a binary that hits points.
type Process string

// The processes with points.
const (
	// Server is space server (control plane, and the node under --dev)
	// or space node (the sandbox manager).
	Server Process = "server"
	// NodeManager is space-node-manager, the node's root process.
	NodeManager Process = "node-manager"
	// Bridge is space-host-bridge, one per execution. The node hands it
	// the Bridge points it was armed with (ChildEnv) when it spawns it.
	Bridge Process = "host-bridge"
	// Guest is space-guest, the guest daemon inside each sandbox. The
	// node-manager hands it the Guest points it was armed with (ChildEnv)
	// in the environment it starts the guest with.
	Guest Process = "guest"
)

// register declares a point of the Server; only points.go calls it.
func register(name, op, doc string) *Point { return registerIn(name, op, Server, doc) }

// registerIn declares a point hit by process; only points.go calls it.
func registerIn(name, op string, process Process, doc string) *Point {
	p := &Point{Name: name, Op: op, Doc: doc, Process: process}
	registry = append(registry, p)
	return p
}

// registerVM declares a point hit by process only in vm executions.
func registerVM(name, op string, process Process, doc string) *Point {
	p := registerIn(name, op, process, doc)
	p.Runtime = "vm"
	return p
}

// All returns every declared point, in declaration order.
func All() []*Point { return append([]*Point(nil), registry...) }

// Lookup returns the point named name.
func Lookup(name string) (*Point, bool) {
	for _, p := range registry {
		if p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// Hit is called by the code at the point's step. Disarmed it returns at
// once (one atomic load); armed with exit, the hit that fires writes one
// line naming the point to stderr and ends the process with ExitCode. A
// nil point is inert.
func (p *Point) Hit() {
	if p == nil {
		return
	}
	at := p.fireAt.Load()
	if at == 0 {
		return
	}
	if p.hits.Add(1) != at {
		return
	}
	fmt.Fprintf(os.Stderr, "failpoint %s: exit %d\n", p.Name, ExitCode)
	exit(ExitCode)
}

// exit ends the process; a unit test replaces it.
var exit = os.Exit

// FromEnvironment arms the points SPACE_FAILPOINTS names. Every binary that
// has points calls it first thing; an error (an unknown name, a bad
// action) must stop the process.
func FromEnvironment() error { return Arm(os.Getenv(EnvVar)) }

// Arm arms the points spec names (SPACE_FAILPOINTS's syntax) and disarms
// all others; "" disarms every point. On an error nothing is changed.
func Arm(spec string) error {
	want := map[*Point]int64{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, action, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("%w: %s: %q is not NAME=ACTION", errdefs.ErrInvalidArgument, EnvVar, item)
		}
		p, known := Lookup(name)
		if !known {
			return fmt.Errorf("%w: %s: no failpoint is named %q (see internal/failpoint/points.go)", errdefs.ErrInvalidArgument, EnvVar, name)
		}
		action, nth, counted := strings.Cut(action, "@")
		if action != "exit" {
			return fmt.Errorf("%w: %s: failpoint %s: unknown action %q (only exit)", errdefs.ErrInvalidArgument, EnvVar, name, action)
		}
		at := int64(1)
		if counted {
			n, err := strconv.ParseInt(nth, 10, 64)
			if err != nil || n < 1 {
				return fmt.Errorf("%w: %s: failpoint %s: hit %q is not a number from 1", errdefs.ErrInvalidArgument, EnvVar, name, nth)
			}
			at = n
		}
		if _, twice := want[p]; twice {
			return fmt.Errorf("%w: %s: failpoint %s is named twice", errdefs.ErrInvalidArgument, EnvVar, name)
		}
		want[p] = at
	}
	for _, p := range registry {
		p.hits.Store(0)
		p.fireAt.Store(want[p])
	}
	return nil
}

// ChildEnv is the SPACE_FAILPOINTS entry ("SPACE_FAILPOINTS=NAME=exit@N,...")
// that arms, in a child process the caller starts, the points of process
// this process was armed with; nil when none is armed. Every child so
// started is armed alike: each host bridge the node spawns, each guest the
// node-manager starts (their hits are counted per process).
func ChildEnv(process Process) []string {
	var items []string
	for _, p := range registry {
		if at := p.fireAt.Load(); at > 0 && p.Process == process {
			items = append(items, p.Name+"=exit@"+strconv.FormatInt(at, 10))
		}
	}
	if len(items) == 0 {
		return nil
	}
	return []string{EnvVar + "=" + strings.Join(items, ",")}
}

// TestProcess reports whether this process's environment sets EnvVar, even
// empty: the mark of a test process. Test-only injections (fake memory
// pressure, ...) are honoured only then, so a stray variable in a real
// deployment cannot change what it measures.
func TestProcess() bool {
	_, ok := os.LookupEnv(EnvVar)
	return ok
}
