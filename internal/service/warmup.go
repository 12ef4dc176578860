package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/store"
)

// A create issued while the deployment warms up (the server just started,
// its default template is building, a node is still bringing up the vm
// runtime) waits for what it needs instead of failing, within WarmupWait
// and the request's own context. The create is synchronous and the
// sandbox is recorded only once placed, so nobody can read its events
// while it waits: the waits are collected here and appended, with the
// times they began, when the sandbox is recorded.
//
// Runtime "auto" never downgrades silently: a create that names no runtime
// gets vm wherever a live node offers vm or is bringing it up (it waits for
// it), and ns only when the operator allowed it (RuntimeFallback "ns"),
// recorded in the sandbox's events; otherwise it is refused with the
// reason.

// DefaultWarmupWait is how long a create waits by default for its template
// and runtime to become ready.
const DefaultWarmupWait = 10 * time.Minute

// WarmupPoll is how often a waiting create looks again.
const WarmupPoll = 200 * time.Millisecond

// FallbackNote is the event of a create that "auto" put on ns.
const FallbackNote = "runtime ns: vm is not available on any node; --runtime-fallback ns"

// warmup is the waiting of one create: its bound and the events to record.
type warmup struct {
	bound  time.Duration
	until  time.Time
	events []store.Event
}

func (s *Sandboxes) newWarmup() *warmup {
	return &warmup{bound: s.cfg.WarmupWait, until: time.Now().Add(s.cfg.WarmupWait)}
}

// note records an event for the sandbox once it exists.
func (w *warmup) note(typ, msg string) {
	w.events = append(w.events, store.Event{Time: time.Now().UTC(), Type: typ, Message: msg})
}

// wait records that the create waits for what (once per what) and sleeps
// one poll; it fails when the bound has passed or ctx is done.
func (w *warmup) wait(ctx context.Context, what string) error {
	msg := "waiting for " + what
	if !slices.ContainsFunc(w.events, func(e store.Event) bool { return e.Message == msg }) {
		w.note("waiting", msg)
	}
	if !time.Now().Before(w.until) {
		return fmt.Errorf("%w: still waiting for %s after %s; retry later (GET /readyz says what is not ready)", errdefs.ErrUnavailable, what, w.bound)
	}
	t := time.NewTimer(min(WarmupPoll, time.Until(w.until)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", msg, ctx.Err())
	case <-t.C:
		return nil
	}
}

// liveNode is a node that heartbeats, with the runtimes it is bringing up.
type liveNode struct {
	store.Node
	pending []string
}

// liveNodes lists the ready nodes whose heartbeat is recent.
func (s *Sandboxes) liveNodes(ctx context.Context) ([]liveNode, error) {
	nodes, err := s.store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	var live []liveNode
	for _, n := range nodes {
		if n.State == store.NodeReady && time.Since(n.LastHeartbeat) < scheduler.HeartbeatTimeout {
			live = append(live, liveNode{Node: n, pending: s.beats.PendingRuntimes(n.ID)})
		}
	}
	return live, nil
}

// runtimeState is what the live nodes say of one runtime: who offers it and
// who is bringing it up.
type runtimeState struct {
	live     int
	offered  bool
	bringing string // a node bringing it up
}

func stateOf(live []liveNode, runtime string) runtimeState {
	st := runtimeState{live: len(live)}
	for _, n := range live {
		if slices.Contains(n.Runtimes, runtime) {
			st.offered = true
		} else if slices.Contains(n.pending, runtime) && st.bringing == "" {
			st.bringing = n.ID
		}
	}
	return st
}

// autoRuntime decides the runtime of a create that names none under
// "auto" (see the top of the file), waiting for a live node when there is
// none yet. note is the event to record, "" for none.
func (s *Sandboxes) autoRuntime(ctx context.Context, w *warmup) (runtime, note string, err error) {
	for {
		live, err := s.liveNodes(ctx)
		if err != nil {
			return "", "", err
		}
		rt, note, err := s.resolveAuto(stateOf(live, "vm"))
		if !errors.Is(err, errNoNodeYet) || !s.awaitsFirstNode(ctx) {
			return rt, note, err
		}
		if err := w.wait(ctx, "a node to register"); err != nil {
			return "", "", err
		}
	}
}

// errNoNodeYet is resolveAuto's answer while no node is live.
var errNoNodeYet = fmt.Errorf("%w: no node is live; `space node` registers one", errdefs.ErrUnavailable)

// awaitsFirstNode reports whether a create with no live node at all waits
// for one: only while the server warms up (it started less than WarmupWait
// ago) and no node is draining. Later, or when the operator drains the
// nodes, no live node is an outage, answered at once.
func (s *Sandboxes) awaitsFirstNode(ctx context.Context) bool {
	if time.Since(s.started) >= s.cfg.WarmupWait {
		return false
	}
	nodes, err := s.store.ListNodes(ctx)
	if err != nil {
		return false
	}
	return !slices.ContainsFunc(nodes, func(n store.Node) bool { return n.State == store.NodeDraining })
}

// resolveAuto is autoRuntime's decision over what the live nodes say of vm.
func (s *Sandboxes) resolveAuto(vm runtimeState) (runtime, note string, err error) {
	switch {
	case vm.offered || vm.bringing != "":
		return "vm", "", nil
	case vm.live == 0:
		return "", "", errNoNodeYet
	case s.cfg.RuntimeFallback == "ns":
		return "ns", FallbackNote, nil
	}
	return "", "", fmt.Errorf("%w: no node offers the vm runtime or is bringing it up, and the server does not fall back to ns (which shares the host kernel): "+
		"name the runtime in the create (\"runtime\": \"ns\"), or start the server with --runtime-fallback ns", errdefs.ErrFailedPrecondition)
}

// awaitTemplate returns template name once it is ready, waiting while it
// builds.
func (s *Sandboxes) awaitTemplate(ctx context.Context, w *warmup, name string) (store.Template, error) {
	for {
		tpl, err := s.store.GetTemplate(ctx, name)
		if err != nil {
			return store.Template{}, err
		}
		switch tpl.State {
		case store.TemplateReady:
			return tpl, nil
		case store.TemplateFailed:
			return store.Template{}, fmt.Errorf("%w: template %q failed to build: %s; build it again (`space template build`) or use another", errdefs.ErrFailedPrecondition, name, tpl.Reason)
		}
		if err := w.wait(ctx, fmt.Sprintf("template %s to finish building", name)); err != nil {
			return store.Template{}, err
		}
	}
}

// awaitPlace places sb, waiting while no node can take it only because a
// live node is still bringing up its runtime or no node is live yet.
func (s *Sandboxes) awaitPlace(ctx context.Context, w *warmup, sbRuntime string, place func() (string, string, error)) (string, string, error) {
	for {
		node, why, err := place()
		if err == nil || !errors.Is(err, errdefs.ErrResourceExhausted) {
			return node, why, err
		}
		live, lerr := s.liveNodes(ctx)
		if lerr != nil {
			return "", "", err
		}
		st := stateOf(live, sbRuntime)
		var what string
		switch {
		case st.live == 0 && s.awaitsFirstNode(ctx):
			what = "a node to register"
		case st.bringing != "":
			what = fmt.Sprintf("node %s to bring up the %s runtime", st.bringing, sbRuntime)
		default:
			return "", "", err
		}
		if err := w.wait(ctx, what); err != nil {
			return "", "", err
		}
	}
}

// Readiness says whether a create of the default template on the default
// runtime can be served now, and if not, what is missing: the default
// template not ready, no live node, no live node offering the runtime. It
// names no node and no build output (GET /readyz serves it to probes
// without a credential).
func (s *Sandboxes) Readiness(ctx context.Context) (sandboxv1.Readiness, error) {
	out := sandboxv1.Readiness{Template: DefaultTemplate}
	switch tpl, err := s.store.GetTemplate(ctx, DefaultTemplate); {
	case errors.Is(err, errdefs.ErrNotFound):
		out.NotReady = append(out.NotReady, fmt.Sprintf("template %s does not exist", DefaultTemplate))
	case err != nil:
		return out, err
	case tpl.State == store.TemplateFailed:
		out.NotReady = append(out.NotReady, fmt.Sprintf("template %s failed to build (`space template list` says why)", DefaultTemplate))
	case tpl.State != store.TemplateReady:
		out.NotReady = append(out.NotReady, fmt.Sprintf("template %s is %s", DefaultTemplate, tpl.State))
	}
	live, err := s.liveNodes(ctx)
	if err != nil {
		return out, err
	}
	out.Runtime = s.cfg.DefaultRuntime
	if out.Runtime == "auto" {
		rt, _, err := s.resolveAuto(stateOf(live, "vm"))
		switch {
		case errors.Is(err, errNoNodeYet):
			out.Runtime = ""
		case err != nil:
			out.Runtime = ""
			out.NotReady = append(out.NotReady, "no node offers the vm runtime or is bringing it up, and --runtime-fallback ns is not set")
		default:
			out.Runtime = rt
		}
	}
	st := stateOf(live, out.Runtime)
	switch {
	case st.live == 0:
		out.NotReady = append(out.NotReady, "no node is live")
	case out.Runtime == "" || st.offered:
	case st.bringing != "":
		out.NotReady = append(out.NotReady, fmt.Sprintf("a node is bringing up the %s runtime", out.Runtime))
	default:
		out.NotReady = append(out.NotReady, fmt.Sprintf("no live node offers the %s runtime", out.Runtime))
	}
	out.Ready = len(out.NotReady) == 0
	return out, nil
}
