package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/failpoint"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/store"
)

// DefaultTemplate is the template of a create that names none.
const DefaultTemplate = "base"

// CreateParams is what a create asks for.
type CreateParams struct {
	sandboxv1.CreateSandboxRequest
	// Egress is the create's policy as sent, for egress.ParsePolicy to
	// judge (it replaces the embedded request's Egress).
	Egress json.RawMessage
	// Key, when set, derives the sandbox's id (sandbox.DerivedID): a
	// retry with the same key after a control plane died mid-create finds
	// the sandbox the first attempt recorded instead of making another.
	// The REST API passes its Idempotency-Key.
	Key string
}

// Create records a sandbox, places it, and waits until it runs or fails
// (a failed sandbox is returned, not an error: its Reason says why).
func (s *Sandboxes) Create(ctx context.Context, c Caller, req CreateParams) (*sandbox.Sandbox, error) {
	if req.Template == "" {
		req.Template = DefaultTemplate
	}
	w := s.newWarmup()
	var runtimeNote string
	if req.Runtime == "" {
		rt, note, err := s.defaultRuntime(ctx, w)
		if err != nil {
			return nil, err
		}
		req.Runtime, runtimeNote = rt, note
	}
	spec, err := sandbox.ValidateCreate(req.CreateSandboxRequest)
	if err != nil {
		return nil, err
	}
	// A name an E2B build made stands for the tenant's latest ready build
	// of it (templatealias.go); the sandbox records that template.
	asked := spec.Template
	if spec.Template, err = s.templateOf(ctx, c.Tenant, asked); err != nil {
		return nil, err
	}
	// A template still building is waited for (warmup.go).
	tpl, err := s.awaitTemplate(ctx, w, spec.Template)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, missingTemplate(errdefs.ErrInvalidArgument, spec.Template)
	} else if err != nil {
		return nil, err
	}
	// The create's own policy, else the template's default, else the
	// server's.
	def := s.cfg.DefaultEgress
	if p, err := TemplateEgress(tpl); err != nil {
		return nil, err
	} else if p != nil {
		def = p
	}
	if spec.Egress, err = sandbox.CreateEgress(req.Egress, req.AllowInternetAccess, def); err != nil {
		return nil, err
	}
	sb := sandbox.New(c.Tenant, spec, time.Now())
	if req.Key != "" {
		sb.SetID(sandbox.DerivedID("create", c.Tenant, req.Key))
		if prev, err := s.store.GetSandboxByID(ctx, sb.ID); err == nil {
			// An earlier attempt with this key recorded the sandbox and
			// did not answer (its server died): this one waits for it.
			if err := s.sameAliasCreate(ctx, prev, sb, asked); err != nil {
				return nil, err
			}
			return s.waitCreated(ctx, prev)
		}
	}
	if err := s.newCA(sb); err != nil {
		return nil, err
	}
	// A create over quota is refused before placement; the admission
	// below decides for creates racing to the last slot.
	// The tenant's quota and usage are read once, for this check and the
	// scheduler's explanation.
	tq, err := s.tenantQuota(ctx, c.Tenant)
	if err != nil {
		return nil, err
	}
	if tq != nil {
		if err := tq.Quota.Admit(c.Tenant, tq.Usage, store.UsageOf(sb)); err != nil {
			return nil, err
		}
	}
	nodeID, why, err := s.awaitPlace(ctx, w, sb.Runtime, func() (string, string, error) { return s.placeWith(ctx, sb, tq) })
	if err != nil {
		return nil, err
	}
	sb.Node = nodeID
	// What the create waited for, the runtime's choice and the placement
	// are its first events: written with the sandbox in one transaction
	// where the store can (one commit per create), else after it.
	events := s.createEvents(sb.ID, w, runtimeNote, why)
	se, together := s.store.(store.SandboxEvents)
	if together {
		err = se.CreateSandboxWithinQuotaAndEvents(ctx, sb, events)
	} else {
		err = s.store.CreateSandboxWithinQuota(ctx, sb)
	}
	if err != nil {
		if req.Key != "" && errors.Is(err, errdefs.ErrConflict) {
			// Another attempt with this key recorded it meanwhile.
			if prev, gerr := s.store.GetSandboxByID(ctx, sb.ID); gerr == nil {
				if err := s.sameAliasCreate(ctx, prev, sb, asked); err != nil {
					return nil, err
				}
				return s.waitCreated(ctx, prev)
			}
		}
		return nil, err
	}
	failpoint.CreateAfterRecord.Hit()
	if !together {
		s.appendEvents(ctx, events)
	}
	return s.waitCreated(ctx, sb)
}

// createEvents are the events of a new sandbox id: what its create waited
// for (w), the runtime note when the server chose the runtime, and why its
// node was chosen.
func (s *Sandboxes) createEvents(id string, w *warmup, runtimeNote, why string) []store.Event {
	now := time.Now().UTC()
	events := make([]store.Event, 0, len(w.events)+2)
	for _, e := range w.events {
		e.SandboxID = id
		events = append(events, e)
	}
	if runtimeNote != "" {
		events = append(events, store.Event{SandboxID: id, Time: now, Type: "runtime", Message: runtimeNote})
	}
	return append(events, store.Event{SandboxID: id, Time: now, Type: "scheduled", Message: why})
}

// appendEvents appends events one by one (a store without
// store.SandboxEvents); a failure is logged.
func (s *Sandboxes) appendEvents(ctx context.Context, events []store.Event) {
	for _, e := range events {
		if _, err := s.store.AppendEvent(context.WithoutCancel(ctx), e); err != nil {
			s.log.Warn("append event", "sandbox", e.SandboxID, "err", err)
		}
	}
}

// sameCreate checks that the sandbox an earlier attempt with the same
// Idempotency-Key recorded is what this request asks for.
func sameCreate(prev, want *sandbox.Sandbox) error {
	if prev.Tenant != want.Tenant || prev.Template != want.Template || prev.Runtime != want.Runtime ||
		prev.Name != want.Name || prev.CPUs != want.CPUs || prev.MemoryMiB != want.MemoryMiB {
		return fmt.Errorf("%w: Idempotency-Key was used for another request", errdefs.ErrConflict)
	}
	return nil
}

// sameAliasCreate is sameCreate for a create that asked for template
// asked: an earlier attempt may have started another build of alias asked
// (a rebuild became ready between the attempts), which is the same
// request.
func (s *Sandboxes) sameAliasCreate(ctx context.Context, prev, want *sandbox.Sandbox, asked string) error {
	if prev.Template != want.Template && (prev.Template == asked || s.isBuildOf(ctx, want.Tenant, asked, prev.Template)) {
		w := *want
		w.Template = prev.Template
		want = &w
	}
	return sameCreate(prev, want)
}

// waitCreated waits until a new sandbox runs or fails (or the create
// timeout passes).
func (s *Sandboxes) waitCreated(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	s.rec.Enqueue(sb.ID)
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CreateTimeout)
	defer cancel()
	for {
		cur, err := s.store.GetSandboxByID(ctx, sb.ID)
		if err != nil {
			return nil, err
		}
		if cur.State != sandbox.StateCreating {
			return cur, nil
		}
		select {
		case <-wait.C:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("%w: sandbox %s is still creating after %s; GET it later", errdefs.ErrUnavailable, sb.ID, s.cfg.CreateTimeout)
			}
			return nil, ctx.Err()
		}
	}
}

// defaultRuntime is the runtime of a create that names none: the configured
// one, or under "auto" the one autoRuntime decides (warmup.go), with the
// event to record when it fell back to ns.
func (s *Sandboxes) defaultRuntime(ctx context.Context, w *warmup) (runtime, note string, err error) {
	if s.cfg.DefaultRuntime != "auto" {
		return s.cfg.DefaultRuntime, "", nil
	}
	return s.autoRuntime(ctx, w)
}

// place picks a node for a new execution of sb.
func (s *Sandboxes) place(ctx context.Context, sb *sandbox.Sandbox) (string, string, error) {
	tq, err := s.tenantQuota(ctx, sb.Tenant)
	if err != nil {
		return "", "", err
	}
	return s.placeWith(ctx, sb, tq)
}

// placeWith is place with the tenant's quota and usage already read (nil:
// no quota).
func (s *Sandboxes) placeWith(ctx context.Context, sb *sandbox.Sandbox, tq *scheduler.TenantQuota) (string, string, error) {
	nodes, err := s.store.ListNodes(ctx)
	if err != nil {
		return "", "", err
	}
	usage, err := s.store.NodeUsage(ctx)
	if err != nil {
		return "", "", err
	}
	st := scheduler.StateFromUsage(nodes, usage, time.Now())
	st.Overcommit = s.cfg.Overcommit
	st.WithMemory(s.nodeMemory())
	st.Warm = s.beats.WarmNodes(nodev1.PoolKey{Template: sb.Template, Runtime: sb.Runtime, CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB})
	req := scheduler.Request{Runtime: sb.Runtime, CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB, Tenant: tq}
	if err := s.templateNodes(ctx, sb, &req); err != nil {
		return "", "", err
	}
	plan, err := scheduler.Place(req, st)
	if err != nil {
		return "", "", err
	}
	return plan.Node, plan.Reason, nil
}

// templateNodes restricts req to the node that holds sb's template when
// the template exists there alone (built from a snapshot on that node:
// store.Template.Node) and the execution starts from the template, not
// from a snapshot (whose export carries the template's bytes to any node).
func (s *Sandboxes) templateNodes(ctx context.Context, sb *sandbox.Sandbox, req *scheduler.Request) error {
	if sb.StartFrom != "" || sb.Template == "" {
		return nil
	}
	tpl, err := s.store.GetTemplate(ctx, sb.Template)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil // the create refuses it; a restore needs no template row
	}
	if err != nil {
		return err
	}
	if tpl.Node != "" {
		req.Only = []string{tpl.Node}
		req.OnlyWhy = fmt.Sprintf("holds template %s (built from a snapshot there, no other node has it)", tpl.Name)
	}
	return nil
}

// nodeMemory is the nodes' memory as their heartbeats report it (none
// without heartbeats: every node unreported).
func (s *Sandboxes) nodeMemory() map[string]scheduler.Memory {
	if s.beats == nil {
		return nil
	}
	return s.beats.NodeMemory()
}

// placeOn checks that node can take sb as the scheduler would judge it
// (live, the runtime, room), and says why it was chosen.
func (s *Sandboxes) placeOn(ctx context.Context, sb *sandbox.Sandbox, node string) (string, error) {
	nodes, err := s.store.ListNodes(ctx)
	if err != nil {
		return "", err
	}
	var only []store.Node
	for _, n := range nodes {
		if n.ID == node {
			only = append(only, n)
		}
	}
	if len(only) == 0 {
		return "", fmt.Errorf("%w: node %q is not registered", errdefs.ErrNotFound, node)
	}
	usage, err := s.store.NodeUsage(ctx)
	if err != nil {
		return "", err
	}
	tq, err := s.tenantQuota(ctx, sb.Tenant)
	if err != nil {
		return "", err
	}
	st := scheduler.StateFromUsage(only, usage, time.Now())
	st.Overcommit = s.cfg.Overcommit
	st.WithMemory(s.nodeMemory())
	plan, err := scheduler.Place(scheduler.Request{Runtime: sb.Runtime, CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB, Tenant: tq}, st)
	if err != nil {
		return "", err
	}
	return "node chosen by the caller; " + plan.Reason, nil
}

// TemplateEgress is a template's default policy, nil when it has none.
func TemplateEgress(t store.Template) (*egress.Policy, error) {
	if t.Egress == "" {
		return nil, nil
	}
	p, err := egress.ParsePolicy([]byte(t.Egress))
	if err != nil {
		return nil, fmt.Errorf("template %s: stored egress policy: %w", t.Name, err)
	}
	return p, nil
}
