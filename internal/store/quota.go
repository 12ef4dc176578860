package store

import (
	"fmt"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

// MaxQuotaValue bounds every limit of a Quota, so that sums of usage stay far
// from overflowing a database INTEGER.
const MaxQuotaValue = 1 << 30

// Quota is the most a tenant's sandboxes that hold resources may count and
// use together. A zero field is no limit on that figure.
type Quota struct {
	MaxSandboxes int
	MaxMemoryMiB int
	MaxCPUs      int
}

// Unlimited reports whether q limits nothing.
func (q Quota) Unlimited() bool { return q == Quota{} }

// Validate checks that every limit is 0 (unlimited) or positive and at most
// MaxQuotaValue.
func (q Quota) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"max_sandboxes", q.MaxSandboxes}, {"max_memory_mib", q.MaxMemoryMiB}, {"max_cpus", q.MaxCPUs}} {
		if f.v < 0 || f.v > MaxQuotaValue {
			return fmt.Errorf("%w: quota %s %d: want 0 (unlimited) to %d", errdefs.ErrInvalidArgument, f.name, f.v, MaxQuotaValue)
		}
	}
	return nil
}

// String describes q for people: "2 sandboxes, 4096 MiB, no CPU limit".
func (q Quota) String() string {
	limit := func(v int, unit string) string {
		if v == 0 {
			return "no " + unit + " limit"
		}
		return fmt.Sprintf("%d %s", v, unit)
	}
	return strings.Join([]string{limit(q.MaxSandboxes, "sandboxes"), limit(q.MaxMemoryMiB, "MiB"), limit(q.MaxCPUs, "CPUs")}, ", ")
}

// Usage is what a tenant's sandboxes that hold resources use together.
type Usage struct {
	Sandboxes int
	MemoryMiB int
	CPUs      int
}

// String describes u for people: "1 sandboxes, 512 MiB, 1 CPUs".
func (u Usage) String() string {
	return fmt.Sprintf("%d sandboxes, %d MiB, %d CPUs", u.Sandboxes, u.MemoryMiB, u.CPUs)
}

// UsageOf is what one sandbox adds to its tenant's usage when it holds
// resources.
func UsageOf(sb *sandbox.Sandbox) Usage {
	return Usage{Sandboxes: 1, MemoryMiB: sb.MemoryMiB, CPUs: sb.CPUs}
}

// HoldsResources reports whether a sandbox in state s occupies resources on
// a node and so counts against its tenant's quota: every state but
// hibernated, stopped, failed and deleted (a deleting sandbox holds its
// resources until its execution is gone).
func HoldsResources(s sandbox.State) bool {
	for _, r := range ReleasedStates {
		if s == r {
			return false
		}
	}
	return true
}

// ReleasedStates are the states in which a sandbox holds no resources.
var ReleasedStates = []sandbox.State{sandbox.StateHibernated, sandbox.StateStopped, sandbox.StateFailed, sandbox.StateDeleted}

// Admit checks that a tenant using u may add more under quota q: nil if it
// may, else the *QuotaError naming the first limit it would pass.
func (q Quota) Admit(tenant string, u, more Usage) error {
	for _, l := range []struct {
		limit     string
		max, used int
		add       int
	}{
		{"sandboxes", q.MaxSandboxes, u.Sandboxes, more.Sandboxes},
		{"memory", q.MaxMemoryMiB, u.MemoryMiB, more.MemoryMiB},
		{"cpus", q.MaxCPUs, u.CPUs, more.CPUs},
	} {
		if l.max > 0 && l.add > 0 && l.used+l.add > l.max {
			return &QuotaError{Tenant: tenant, Limit: l.limit, Quota: q, Usage: u, Need: more}
		}
	}
	return nil
}

// QuotaError is the refusal of an admission that would take a tenant past
// its quota. It is errdefs.ErrQuotaExceeded (of class ResourceExhausted);
// its message names the limit, the tenant's usage and what to do, and is
// meant for the tenant's eyes.
type QuotaError struct {
	Tenant string
	// Limit is the limit that would be passed: "sandboxes", "memory" or
	// "cpus".
	Limit string
	Quota Quota
	// Usage is the tenant's usage before the admission, Need what the
	// admission would add.
	Usage Usage
	Need  Usage
}

// Error implements error.
func (e *QuotaError) Error() string {
	var what string
	switch e.Limit {
	case "sandboxes":
		what = fmt.Sprintf("at most %d running sandboxes; %d already hold resources", e.Quota.MaxSandboxes, e.Usage.Sandboxes)
	case "memory":
		what = fmt.Sprintf("at most %d MiB of memory; its sandboxes hold %d MiB and this one needs %d MiB", e.Quota.MaxMemoryMiB, e.Usage.MemoryMiB, e.Need.MemoryMiB)
	default:
		what = fmt.Sprintf("at most %d CPUs; its sandboxes hold %d and this one needs %d", e.Quota.MaxCPUs, e.Usage.CPUs, e.Need.CPUs)
	}
	return fmt.Sprintf("tenant %s is over its quota: %s (usage %s; quota %s); delete or hibernate a sandbox, or ask an admin to raise the quota",
		e.Tenant, what, e.Usage, e.Quota)
}

// Unwrap makes errors.Is(err, errdefs.ErrQuotaExceeded) and so
// errors.Is(err, errdefs.ErrResourceExhausted) true.
func (e *QuotaError) Unwrap() error { return errdefs.ErrQuotaExceeded }
