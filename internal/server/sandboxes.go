package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/store"
)

// createRequest is the body of POST /v1/sandboxes as the server reads it:
// the egress policy stays raw, for egress.ParsePolicy to judge (the outer
// field wins over the embedded one of the same JSON name).
type createRequest struct {
	sandboxv1.CreateSandboxRequest
	Egress json.RawMessage `json:"egress,omitempty"`
}

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	tenant := callerOf(r.Context()).Tenant
	var req createRequest
	if err := decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	start := time.Now()
	sb, err := s.create(r.Context(), tenant, req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if sb.State == sandbox.StateFailed {
		s.writeError(w, r, fmt.Errorf("sandbox %s failed to start: %s", sb.ID, sb.Reason))
		return
	}
	s.metrics.observeCreate(time.Since(start))
	writeJSON(w, http.StatusCreated, s.apiOf(sb))
}

func fingerprintOf(method, path string, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", method, path)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// defaultTemplate is the template of a create that names none.
const defaultTemplate = "base"

// create records a sandbox, places it, and waits until it runs or fails.
func (s *Server) create(ctx context.Context, tenant string, req createRequest) (*sandbox.Sandbox, error) {
	if req.Template == "" {
		req.Template = defaultTemplate
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
	if _, err := s.store.GetTemplate(ctx, spec.Template); errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("%w: template %q does not exist; `space template list` shows the templates", errdefs.ErrInvalidArgument, spec.Template)
	} else if err != nil {
		return nil, err
	}
	// A template still building is waited for (warmup.go).
	tpl, err := s.awaitTemplate(ctx, w, spec.Template)
	if err != nil {
		return nil, err
	}
	// The create's own policy, else the template's default, else the
	// server's.
	def := s.cfg.DefaultEgress
	if p, err := templateEgress(tpl); err != nil {
		return nil, err
	} else if p != nil {
		def = p
	}
	if spec.Egress, err = sandbox.CreateEgress(req.Egress, req.AllowInternetAccess, def); err != nil {
		return nil, err
	}
	sb := sandbox.New(tenant, spec, time.Now())
	key := idempotencyKeyOf(ctx)
	if key != "" {
		sb.SetID(sandbox.DerivedID("create", tenant, key))
		if prev, err := s.store.GetSandboxByID(ctx, sb.ID); err == nil {
			// An earlier attempt with this key recorded the sandbox and
			// did not answer (its server died): this one waits for it.
			if err := sameCreate(prev, sb); err != nil {
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
	if err := s.quotaCheck(ctx, tenant, store.UsageOf(sb)); err != nil {
		return nil, err
	}
	nodeID, why, err := s.awaitPlace(ctx, w, sb.Runtime, func() (string, string, error) { return s.place(ctx, sb) })
	if err != nil {
		return nil, err
	}
	sb.Node = nodeID
	if err := s.store.CreateSandboxWithinQuota(ctx, sb); err != nil {
		if key != "" && errors.Is(err, errdefs.ErrConflict) {
			// Another attempt with this key recorded it meanwhile.
			if prev, gerr := s.store.GetSandboxByID(ctx, sb.ID); gerr == nil {
				if err := sameCreate(prev, sb); err != nil {
					return nil, err
				}
				return s.waitCreated(ctx, prev)
			}
		}
		return nil, err
	}
	s.recordWarmup(ctx, sb.ID, w)
	if runtimeNote != "" {
		s.event(ctx, sb.ID, "runtime", runtimeNote)
	}
	s.event(ctx, sb.ID, "scheduled", why)
	return s.waitCreated(ctx, sb)
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

// waitCreated waits until a new sandbox runs or fails (or the create
// timeout passes).
func (s *Server) waitCreated(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Sandbox, error) {
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
func (s *Server) defaultRuntime(ctx context.Context, w *warmup) (runtime, note string, err error) {
	if s.cfg.DefaultRuntime != "auto" {
		return s.cfg.DefaultRuntime, "", nil
	}
	return s.autoRuntime(ctx, w)
}

// place picks a node for a new sandbox.
func (s *Server) place(ctx context.Context, sb *sandbox.Sandbox) (string, string, error) {
	nodes, err := s.store.ListNodes(ctx)
	if err != nil {
		return "", "", err
	}
	all, err := s.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return "", "", err
	}
	st := scheduler.StateFrom(nodes, all, time.Now())
	st.Warm = s.nodes.warmNodes(nodev1.PoolKey{Template: sb.Template, Runtime: sb.Runtime, CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB})
	tq, err := s.tenantQuota(ctx, sb.Tenant)
	if err != nil {
		return "", "", err
	}
	plan, err := scheduler.Place(scheduler.Request{
		Runtime: sb.Runtime, CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB, Tenant: tq,
	}, st)
	if err != nil {
		return "", "", err
	}
	return plan.Node, plan.Reason, nil
}

// placeOn checks that node can take sb as the scheduler would judge it
// (live, the runtime, room), and says why it was chosen.
func (s *Server) placeOn(ctx context.Context, sb *sandbox.Sandbox, node string) (string, error) {
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
	all, err := s.store.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		return "", err
	}
	tq, err := s.tenantQuota(ctx, sb.Tenant)
	if err != nil {
		return "", err
	}
	plan, err := scheduler.Place(scheduler.Request{Runtime: sb.Runtime, CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB, Tenant: tq}, scheduler.StateFrom(only, all, time.Now()))
	if err != nil {
		return "", err
	}
	return "node chosen by the caller; " + plan.Reason, nil
}

func (s *Server) event(ctx context.Context, id, typ, msg string) {
	_, err := s.store.AppendEvent(context.WithoutCancel(ctx), store.Event{SandboxID: id, Time: time.Now().UTC(), Type: typ, Message: msg})
	if err != nil {
		s.log.Warn("append event", "sandbox", id, "err", err)
	}
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	sbs, err := s.store.ListSandboxes(r.Context(), store.SandboxFilter{Tenant: callerOf(r.Context()).Tenant})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := sandboxv1.SandboxList{Sandboxes: []sandboxv1.Sandbox{}}
	for _, sb := range sbs {
		if sb.State != sandbox.StateDeleted {
			out.Sandboxes = append(out.Sandboxes, s.apiOf(sb))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.apiOf(sb))
}

// handleDelete marks the sandbox deleting and waits until its execution is gone.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request) {
	sb, err := s.sandboxFor(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wait := s.rec.Watch(sb.ID)
	defer wait.Stop()
	for {
		err = sb.Apply(sandbox.OpDelete)
		if err == nil {
			err = s.store.UpdateSandbox(r.Context(), sb)
		}
		if !errors.Is(err, errdefs.ErrConflict) || errors.As(err, new(*sandbox.IllegalTransitionError)) {
			break
		}
		// Someone else updated the row: re-read and try again.
		if sb, err = s.sandboxFor(r); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.event(r.Context(), sb.ID, "state", "delete requested")
	s.rec.Enqueue(sb.ID)
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	for {
		_, err := s.store.GetSandboxByID(ctx, sb.ID)
		if errors.Is(err, errdefs.ErrNotFound) {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		select {
		case <-wait.C:
		case <-ctx.Done():
			// The reconciler finishes the deletion; the sandbox is already
			// unusable and reported as deleting.
			w.WriteHeader(http.StatusAccepted)
			return
		}
	}
}
