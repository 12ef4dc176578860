package sandbox

import (
	"maps"
	"slices"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/egress"
)

// Sandbox is the control plane's record of one sandbox: what was asked for,
// where it runs, and where it is in its lifecycle.
//
// Desired is the stable state the sandbox should reach (running, paused,
// hibernated, stopped, deleted, failed); State is the state last observed or
// entered, transitional states included, and is what the API reports. The
// reconciler drives State toward Desired.
//
// The execution fields (Generation, Node, ExecID, ActivationID) name the
// incarnation currently serving the sandbox (ARCHITECTURE.md §3).
type Sandbox struct {
	ID        string
	Tenant    string
	Name      string
	Template  string
	Runtime   string
	CPUs      int
	MemoryMiB int
	DiskMiB   int
	Env       map[string]string
	Metadata  map[string]string
	CreatedAt time.Time
	// ExpiresAt is when the sandbox is deleted; zero means never.
	ExpiresAt time.Time
	// IdleTimeout is how long the sandbox may go without a request before
	// IdleAction ("pause" or "hibernate") is applied; 0 means never. The
	// next request resumes it.
	IdleTimeout time.Duration
	IdleAction  string
	// Egress is the sandbox's egress policy, sent with every execution it
	// starts and pushed to the running one when it changes. nil: recorded
	// before sandboxes had egress policies; the control plane's default
	// applies (EgressOr). A Policy is immutable, so copies share it.
	Egress *egress.Policy
	// Project groups sandboxes of a tenant for credentials scoped to a
	// project (internal/credentials); empty: none.
	Project string
	// CACert is the sandbox's interception CA certificate (PEM): the guest
	// trusts it and the gateway mints leaves with it for hosts that have a
	// credential rule. CAKey is the CA's private key sealed at rest (only the
	// control plane can open it; see internal/server/ca.go). Both are empty
	// for a sandbox recorded before sandboxes had CAs: one is made at its
	// next start. A fork gets a CA of its own.
	CACert string
	CAKey  []byte

	Desired State
	State   State
	// Reason says why the sandbox failed, when it did.
	Reason string

	// Generation counts executions; it increments with every new one.
	Generation uint64
	// Node is the node the current execution runs on; empty until placed.
	Node string
	// ExecID identifies the current execution: "<id>-g<generation>-<rand>".
	ExecID string
	// ActivationID identifies one start attempt of the current execution.
	ActivationID string
	// StartFrom is the snapshot the current execution starts from (after a
	// stop, a rollback, a restore, or for a fork); empty: the template.
	StartFrom string

	// Version is the optimistic concurrency counter the store checks and
	// increments on every update.
	Version   int64
	UpdatedAt time.Time
}

// New returns a sandbox for tenant built from a validated spec, in state
// creating with its first execution, created at now.
func New(tenant string, spec Spec, now time.Time) *Sandbox {
	sb := &Sandbox{
		ID:        NewID(),
		Tenant:    tenant,
		Name:      spec.Name,
		Template:  spec.Template,
		Runtime:   spec.Runtime,
		CPUs:      spec.CPUs,
		MemoryMiB: spec.MemoryMiB,
		DiskMiB:   spec.DiskMiB,
		Env:       maps.Clone(spec.Env),
		Metadata:  maps.Clone(spec.Metadata),
		CreatedAt: now.UTC(),
		UpdatedAt: now.UTC(),

		IdleTimeout: spec.IdleTimeout,
		IdleAction:  spec.IdleAction,
		Egress:      spec.Egress,
		Project:     spec.Project,
	}
	if spec.Timeout > 0 {
		sb.ExpiresAt = sb.CreatedAt.Add(spec.Timeout)
	}
	// Create from StateNone is always legal.
	if err := sb.Apply(OpCreate); err != nil {
		panic("sandbox: create from none must be legal: " + err.Error())
	}
	return sb
}

// SetID gives a sandbox New just made (not recorded yet) the id id instead
// of its random one, and its current execution an id under it: an
// execution's id always starts with its sandbox's.
func (sb *Sandbox) SetID(id string) {
	sb.ID = id
	if sb.ExecID != "" {
		sb.ExecID = NewExecID(id, sb.Generation)
	}
}

// Apply starts op on the sandbox: it moves State by the lifecycle table, sets
// Desired to where State settles, and when op starts a new execution it
// increments Generation and assigns a fresh ExecID and ActivationID and clears
// Node (the scheduler places the new execution). An illegal op returns an
// *IllegalTransitionError and leaves the sandbox unchanged.
func (sb *Sandbox) Apply(op Op) error {
	to, err := Apply(sb.State, op)
	if err != nil {
		return err
	}
	if StartsExecution(sb.State, to) {
		sb.Generation++
		sb.ExecID = NewExecID(sb.ID, sb.Generation)
		sb.ActivationID = NewActivationID()
		sb.Node = ""
	}
	if to != StateFailed {
		sb.Reason = ""
	}
	sb.State = to
	sb.Desired = Settled(to)
	return nil
}

// Fail records that the current execution failed and why.
func (sb *Sandbox) Fail(reason string) error {
	if err := sb.Apply(OpFail); err != nil {
		return err
	}
	sb.Reason = reason
	return nil
}

// Expired reports whether the sandbox has a timeout that has passed at now.
func (sb *Sandbox) Expired(now time.Time) bool {
	return !sb.ExpiresAt.IsZero() && !now.Before(sb.ExpiresAt)
}

// API returns the sandbox as the REST API reports it.
func (sb *Sandbox) API() sandboxv1.Sandbox {
	out := sandboxv1.Sandbox{
		ID:         sb.ID,
		Name:       sb.Name,
		Tenant:     sb.Tenant,
		State:      sandboxv1.State(sb.State),
		Reason:     sb.Reason,
		Template:   sb.Template,
		Runtime:    sb.Runtime,
		Generation: sb.Generation,
		Node:       sb.Node,
		CPUs:       sb.CPUs,
		MemoryMiB:  sb.MemoryMiB,
		DiskMiB:    sb.DiskMiB,
		Env:        maps.Clone(sb.Env),
		Metadata:   maps.Clone(sb.Metadata),
		CreatedAt:  sb.CreatedAt,
		Project:    sb.Project,
	}
	if !sb.ExpiresAt.IsZero() {
		t := sb.ExpiresAt
		out.ExpiresAt = &t
	}
	if sb.IdleTimeout > 0 {
		out.IdleTimeout, out.IdleAction = sb.IdleTimeout.String(), sb.IdleAction
	}
	if sb.Egress != nil {
		out.Egress = EgressAPI(sb.Egress)
	}
	return out
}

// Clone returns a deep copy of sb.
func (sb *Sandbox) Clone() *Sandbox {
	c := *sb
	c.Env = maps.Clone(sb.Env)
	c.Metadata = maps.Clone(sb.Metadata)
	c.CAKey = slices.Clone(sb.CAKey)
	return &c
}
