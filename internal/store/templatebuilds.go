package store

import (
	"context"
	"time"
)

// TemplateBuildState is where a build of E2B's template build API is; the
// values are E2B's.
type TemplateBuildState string

// Template build states. Ready and error are final.
const (
	BuildWaiting  TemplateBuildState = "waiting"
	BuildBuilding TemplateBuildState = "building"
	BuildReady    TemplateBuildState = "ready"
	BuildError    TemplateBuildState = "error"
)

// Final reports whether s is a finished build's state.
func (s TemplateBuildState) Final() bool { return s == BuildReady || s == BuildError }

// TemplateBuild is one build of E2B's template build API
// (internal/e2bapi tplbuild.go): the SPACE template Template made for
// tenant TenantID under the E2B name Alias. The latest ready build of an
// alias is the template that name stands for.
type TemplateBuild struct {
	ID       string
	TenantID string
	Alias    string
	Template string
	State    TemplateBuildState
	// Reason is a failed build's reason (JSON, E2B's), "" otherwise.
	Reason string
	// SandboxID is the build sandbox while one runs, "" otherwise.
	SandboxID string
	// CPUs and MemoryMiB size the sandboxes made through the alias; 0 is
	// the server's default.
	CPUs      int
	MemoryMiB int
	CreatedAt time.Time
	// UpdatedAt is the last write: a running build rewrites it every few
	// seconds, so one whose UpdatedAt stopped moving was lost with its
	// server.
	UpdatedAt time.Time
}

// TemplateBuilds stores the builds of E2B's template build API, so that a
// restarted control plane and every replica answer their status.
type TemplateBuilds interface {
	// CreateTemplateBuild stores a new build; a duplicate id is
	// ErrConflict.
	CreateTemplateBuild(ctx context.Context, b TemplateBuild) error
	// GetTemplateBuild returns build id or ErrNotFound.
	GetTemplateBuild(ctx context.Context, id string) (TemplateBuild, error)
	// ListTemplateBuilds returns every build of alias, of any tenant,
	// newest first.
	ListTemplateBuilds(ctx context.Context, alias string) ([]TemplateBuild, error)
	// ListRunningTemplateBuilds returns every build that is not final
	// (waiting or building), of any tenant, oldest first: what a sweep
	// looks through for builds whose server died.
	ListRunningTemplateBuilds(ctx context.Context) ([]TemplateBuild, error)
	// UpdateTemplateBuild overwrites the state, reason, sandbox and
	// template of a build that is not final and sets UpdatedAt (a write of
	// the same values is a heartbeat). A final build is ErrConflict (a
	// build marked lost is never brought back), a missing one ErrNotFound.
	UpdateTemplateBuild(ctx context.Context, b TemplateBuild) error
	// DeleteTemplateBuild deletes build id; a missing one is ErrNotFound.
	DeleteTemplateBuild(ctx context.Context, id string) error
}
