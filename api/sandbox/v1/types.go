// Package sandboxv1 holds the wire types of SPACE's public REST API (/v1). The
// server encodes them, the Go SDK and the CLI decode them; field names are part of
// the public contract in SPEC.md.
package sandboxv1

import (
	"encoding/json"
	"time"
)

// State is a sandbox's lifecycle state as the API reports it.
type State string

// The lifecycle states (ARCHITECTURE.md §4).
const (
	StateCreating    State = "creating"
	StateRunning     State = "running"
	StatePausing     State = "pausing"
	StatePaused      State = "paused"
	StateResuming    State = "resuming"
	StateHibernating State = "hibernating"
	StateHibernated  State = "hibernated"
	StateRestoring   State = "restoring"
	StateRecovering  State = "recovering" // crash recovery: a new execution from the latest snapshot
	StateStopping    State = "stopping"
	StateStopped     State = "stopped"
	StateDeleting    State = "deleting"
	StateDeleted     State = "deleted"
	StateFailed      State = "failed"
)

// Error is the body of every non-2xx response. Reason, when set, refines
// Code with a stable name a program may act on (docs/api-errors.md lists
// them): "no_capacity" beside "unavailable", "quota_exceeded" beside
// "resource_exhausted".
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
}

// Error codes used in Error.Code.
const (
	CodeInvalidArgument    = "invalid_argument"
	CodeUnauthenticated    = "unauthenticated"
	CodePermissionDenied   = "permission_denied"
	CodeNotFound           = "not_found"
	CodeConflict           = "conflict"
	CodeTooLarge           = "too_large"
	CodeRateLimited        = "rate_limited"
	CodeUnavailable        = "unavailable"
	CodeFailedPrecondition = "failed_precondition"
	CodeInternal           = "internal"
	// CodeRefreshRoute (HTTP 503): the sandbox moved to a new execution
	// while the request was on its way and the request could not be
	// replayed safely (a process start, input, an upload). The route is
	// repaired: retrying reaches the new execution.
	CodeRefreshRoute = "refresh_route"
	// CodeNotImplemented (HTTP 501): this server does not offer the
	// operation; retrying it here will fail again.
	CodeNotImplemented = "not_implemented"
	// CodeClockDisagrees (HTTP 503, node-api and host bridge only): the
	// node's clock is not known to agree with the control plane's, so it
	// refuses capabilities until it is. The public API answers it as
	// CodeUnavailable with the reason "clock_disagrees".
	CodeClockDisagrees = "clock_disagrees"
)

// CodeResourceExhausted refuses what would take a tenant past its quota
// (HTTP 429, reason "quota_exceeded"; the message names the limit, the
// tenant's usage and what to do), or what ran into another limit (HTTP 503,
// no reason).
const CodeResourceExhausted = "resource_exhausted"

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Template  string `json:"template,omitempty"` // default "base"; "minimal" for busybox
	Runtime   string `json:"runtime,omitempty"`  // "vm" or "ns"; default chosen by the server
	Name      string `json:"name,omitempty"`
	CPUs      int    `json:"cpus,omitempty"`       // default 1
	MemoryMiB int    `json:"memory_mib,omitempty"` // default 512
	// DiskMiB is the disk size, default 2048. On ns (btrfs) it bounds what
	// the sandbox writes beyond its template: past it, writes fail with
	// "disk quota exceeded". A vm's disk is its template's image.
	DiskMiB int               `json:"disk_mib,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Timeout is a Go duration ("30m"); after it the sandbox is deleted. Empty: no timeout.
	Timeout  string            `json:"timeout,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// IdleTimeout is a Go duration: after it without a request the sandbox
	// is paused or hibernated (IdleAction, default "pause"), and the next
	// request resumes it. Empty: never.
	IdleTimeout string `json:"idle_timeout,omitempty"`
	IdleAction  string `json:"idle_action,omitempty"` // "pause", "hibernate" (undone by the next request), "pause-held" or "stop" (undone by a resume or start)
	// Egress is the sandbox's egress policy (docs/network.md). Absent: the
	// server's default (without --default-egress, {"allow_internet": true}).
	Egress *EgressPolicy `json:"egress,omitempty"`
	// AllowInternetAccess is E2B's shorthand: false means
	// {"allow_internet": false}, true {"allow_internet": true}. With Egress
	// it must agree with Egress.AllowInternet.
	AllowInternetAccess *bool `json:"allow_internet_access,omitempty"`
	// Project puts the sandbox in a project of its tenant: credentials
	// scoped to that project apply to it (docs/credentials.md). Letters,
	// digits, '.', '_' and '-'; empty: none.
	Project string `json:"project,omitempty"`
}

// EgressPolicy is a sandbox's egress policy: what its network interface may
// reach through the gateway. It is the body of GET and PUT
// /v1/sandboxes/{id}/egress. Loopback, private, link-local and cloud metadata
// addresses are denied unless a CIDR allow rule names a private range
// explicitly; docs/network.md has the rules and the order they apply in.
//
//	{"allow_internet": false, "allow": {"domains": ["pypi.org", "*.pythonhosted.org"], "ports": ["443"]}}
type EgressPolicy struct {
	// AllowInternet decides a connection no rule decides: true allows it,
	// false denies it.
	AllowInternet bool `json:"allow_internet"`
	// Allow lists what is allowed; Deny what is denied before Allow is
	// consulted.
	Allow EgressRules `json:"allow,omitzero"`
	Deny  EgressRules `json:"deny,omitzero"`
}

// EgressRules is one list of rules of an EgressPolicy.
type EgressRules struct {
	// Domains are exact names ("example.com") or wildcards ("*.example.com":
	// subdomains at any depth, not the apex), lowercase, punycode for
	// internationalised names.
	Domains []string `json:"domains,omitempty"`
	// CIDRs are IPv4 or IPv6 prefixes without host bits, or single addresses.
	CIDRs []string `json:"cidrs,omitempty"`
	// Ports are single ports ("443") or inclusive ranges ("8000-8100"). In
	// Allow they are a filter: when non-empty, any other port is denied.
	Ports []string `json:"ports,omitempty"`
}

// SetTimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout: the
// sandbox now lives Timeout (a Go duration) from now; "0" removes the timeout.
type SetTimeoutRequest struct {
	Timeout string `json:"timeout"`
}

// Sandbox is what the API reports of one sandbox.
type Sandbox struct {
	ID         string            `json:"id"`
	Name       string            `json:"name,omitempty"`
	Tenant     string            `json:"tenant"`
	State      State             `json:"state"`
	Reason     string            `json:"reason,omitempty"` // why it failed, when it did
	Template   string            `json:"template"`
	Runtime    string            `json:"runtime"`
	Generation uint64            `json:"generation"`
	Node       string            `json:"node"`
	CPUs       int               `json:"cpus"`
	MemoryMiB  int               `json:"memory_mib"`
	DiskMiB    int               `json:"disk_mib"`
	Env        map[string]string `json:"env,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	CreatedAt  time.Time         `json:"created_at"`
	ExpiresAt  *time.Time        `json:"expires_at,omitempty"`
	// IdleTimeout and IdleAction as created (absent: no idle handling).
	IdleTimeout string `json:"idle_timeout,omitempty"`
	IdleAction  string `json:"idle_action,omitempty"`
	// Egress is the sandbox's egress policy.
	Egress *EgressPolicy `json:"egress,omitempty"`
	// Project is the sandbox's project, when it has one.
	Project string `json:"project,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
	// NextPageToken is set on a paged listing (?limit=) that has more:
	// pass it as ?page_token= for the next page.
	NextPageToken string `json:"next_page_token,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec (run to completion).
type ExecRequest struct {
	Cmd   []string          `json:"cmd"`
	Env   map[string]string `json:"env,omitempty"`
	Cwd   string            `json:"cwd,omitempty"`
	User  string            `json:"user,omitempty"`
	Stdin string            `json:"stdin,omitempty"`
	// Timeout is a Go duration; the command is killed when it passes. Default 60s.
	Timeout string `json:"timeout,omitempty"`
}

// ExecResult is the answer to ExecRequest.
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	// Truncated is true when stdout or stderr passed the 16 MiB capture limit.
	Truncated bool `json:"truncated,omitempty"`
}

// Process is one process the guest daemon started (an exec, a terminal, a
// code context's kernel), as GET /v1/sandboxes/{id}/processes lists it. Its
// environment is not shown: it may hold values the caller passed as secrets.
type Process struct {
	PID  uint32   `json:"pid"`
	Cmd  string   `json:"cmd"`
	Args []string `json:"args"`
	Cwd  string   `json:"cwd,omitempty"`
	Tag  string   `json:"tag,omitempty"`
}

// ProcessList is the body of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// ExecStart is the first WebSocket text message of GET /v1/sandboxes/{id}/exec.
type ExecStart struct {
	Cmd  []string          `json:"cmd"`
	Env  map[string]string `json:"env,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	User string            `json:"user,omitempty"`
	TTY  bool              `json:"tty,omitempty"`
	Cols uint32            `json:"cols,omitempty"`
	Rows uint32            `json:"rows,omitempty"`
}

// ExecMessage is every later WebSocket text message of a streaming exec, in both
// directions. Data is carried as bytes (base64 in JSON).
//
// Client to server: {"type":"stdin","data":…}, {"type":"close_stdin"},
// {"type":"signal","signal":15}, {"type":"resize","cols":80,"rows":24}.
// Server to client: {"type":"started","pid":N}, {"type":"stdout","data":…},
// {"type":"stderr","data":…}, {"type":"exit","exit_code":N}, {"type":"error","message":…}.
type ExecMessage struct {
	Type     string `json:"type"`
	Data     []byte `json:"data,omitempty"`
	Pid      uint32 `json:"pid,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	Cols     uint32 `json:"cols,omitempty"`
	Rows     uint32 `json:"rows,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Message  string `json:"message,omitempty"`
}

// FileEntry describes one file in GET /v1/sandboxes/{id}/files/list.
type FileEntry struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"`
	Type          string    `json:"type"` // "file", "dir", "symlink"
	Size          int64     `json:"size"`
	Mode          uint32    `json:"mode"`
	Owner         string    `json:"owner,omitempty"`
	Group         string    `json:"group,omitempty"`
	ModifiedAt    time.Time `json:"modified_at"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}

// FileList is the body of GET /v1/sandboxes/{id}/files/list?path=&depth=
// (&limit=&page_token= for a paged listing).
type FileList struct {
	Entries []FileEntry `json:"entries"`
	// NextPageToken is set on a paged answer when entries may follow: the
	// page_token of the next page.
	NextPageToken string `json:"next_page_token,omitempty"`
}

// FileEvent is one WebSocket text message of GET /v1/sandboxes/{id}/files/watch.
type FileEvent struct {
	Name string `json:"name"`
	Type string `json:"type"` // "create", "write", "remove", "rename", "chmod"
}

// Template is one template in GET /v1/templates.
type Template struct {
	Name      string    `json:"name"`
	Source    string    `json:"source"`
	State     string    `json:"state"` // "building", "ready", "failed"
	Reason    string    `json:"reason,omitempty"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	// Egress is the default egress policy of sandboxes made from the
	// template (absent: the server's default).
	Egress *EgressPolicy `json:"egress,omitempty"`
	// Progress is the build's latest reading while it is building, and
	// its last one after (absent for a template built before the server
	// recorded progress).
	Progress *Progress `json:"progress,omitempty"`
}

// TemplateList is the body of GET /v1/templates.
type TemplateList struct {
	Templates []Template `json:"templates"`
}

// BuildTemplateRequest is the body of POST /v1/templates. From is "dir:/path",
// "tar:/path.tar[.gz]", "oci:/layout[#REF]", "docker-archive:/file.tar[#TAG]"
// (paths on the server's machine) or "debootstrap:SUITE[+pkg,…]".
type BuildTemplateRequest struct {
	Name string `json:"name"`
	From string `json:"from"`
	// Egress, when set, is the default egress policy of sandboxes made from
	// the template (a create's own policy wins).
	Egress json.RawMessage `json:"egress,omitempty"`
}

// Tenant is one tenant.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	Quota     Quota     `json:"quota"`
	Usage     Usage     `json:"usage"`
}

// Quota is a tenant's limits on its sandboxes that hold resources (every
// state but hibernated, stopped, failed and deleted); 0 is unlimited. It is
// also the body of PUT /v1/tenants/{id}/quota.
type Quota struct {
	MaxSandboxes int `json:"max_sandboxes"`
	MaxMemoryMiB int `json:"max_memory_mib"`
	MaxCPUs      int `json:"max_cpus"`
}

// Usage is what a tenant's sandboxes that hold resources use together.
type Usage struct {
	Sandboxes int `json:"sandboxes"`
	MemoryMiB int `json:"memory_mib"`
	CPUs      int `json:"cpus"`
}

// TenantList is the body of GET /v1/tenants.
type TenantList struct {
	Tenants []Tenant `json:"tenants"`
}

// CreateTenantRequest is the body of POST /v1/tenants.
type CreateTenantRequest struct {
	Name string `json:"name"`
}

// CreateTenantResponse carries the new tenant and its first API key (shown once).
type CreateTenantResponse struct {
	Tenant Tenant `json:"tenant"`
	Key    string `json:"key"`
}

// APIKey describes a key; the secret is never returned after creation.
type APIKey struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	Prefix    string     `json:"prefix"`
	Admin     bool       `json:"admin"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// APIKeyList is the body of GET /v1/keys.
type APIKeyList struct {
	Keys []APIKey `json:"keys"`
}

// CreateKeyRequest is the body of POST /v1/keys. Tenant defaults to the caller's.
// E2B asks for a key in E2B's shape, "e2b_" and 40 hex (docs/e2b.md), for
// E2B SDKs that check the shape; it is as strong as any key.
type CreateKeyRequest struct {
	Tenant string `json:"tenant,omitempty"`
	E2B    bool   `json:"e2b,omitempty"`
}

// CreateKeyResponse carries the new key's secret, shown once.
type CreateKeyResponse struct {
	Key    APIKey `json:"key"`
	Secret string `json:"secret"`
}

// EncryptionKey is one of a tenant's keys in the KMS (BYOK): it wraps the data
// keys of everything the tenant's sandboxes write to object storage.
type EncryptionKey struct {
	ID        string     `json:"id"`
	Tenant    string     `json:"tenant"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// EncryptionKeyList is the body of GET /v1/tenants/{id}/encryption-keys.
type EncryptionKeyList struct {
	Keys []EncryptionKey `json:"keys"`
}

// Node is a registered node, as GET /v1/nodes reports it (admin).
type Node struct {
	ID        string   `json:"id"`
	State     string   `json:"state"` // "ready", "draining", "down"
	Runtimes  []string `json:"runtimes"`
	CPUs      int      `json:"cpus"`
	MemoryMiB int      `json:"memory_mib"`
	// LastHeartbeat is when the node last reported; Live is false once it
	// missed its heartbeats (the scheduler then places nothing there).
	LastHeartbeat time.Time `json:"last_heartbeat"`
	Live          bool      `json:"live"`
	// Sandboxes counts the sandboxes whose execution is on the node
	// (running, paused, or on the way): what a drain has still to move.
	Sandboxes int `json:"sandboxes"`
	// StoppedOnNode lists the stopped sandboxes whose kept disk lives
	// only on this node: a drain does not move them, and they start
	// only there.
	StoppedOnNode []string `json:"stopped_on_node,omitempty"`
	// WarmPool is the node's warm pool as it last reported it: per
	// template, runtime and size, the prepared sandboxes ready to claim.
	WarmPool []WarmPoolStatus `json:"warm_pool,omitempty"`
	// RuntimeStatus says per runtime what it runs on and what is under
	// way, as the node last reported it: e.g. for vm "q35 (Debian's
	// cloud kernel); building the minimal kernel: compile: 458 of about
	// 995 objects (46%)". Only runtimes with something to say.
	RuntimeStatus map[string]string `json:"runtime_status,omitempty"`
	// CommittedMiB sums the memory limits of the sandboxes that hold
	// resources on the node; MemoryLimitMiB is what they may sum to:
	// MemoryMiB times the server's --memory-overcommit.
	CommittedMiB   int `json:"committed_mib"`
	MemoryLimitMiB int `json:"memory_limit_mib"`
	// MemoryMeasured is true while the node reports its measured memory
	// in its heartbeats (to the replica answering). MemoryTotalMiB is the
	// machine's MemTotal, AvailableMiB its MemAvailable (what new work
	// can get without swapping), UsedMiB their difference; all -1 when
	// not measured.
	MemoryMeasured bool `json:"memory_measured"`
	MemoryTotalMiB int  `json:"memory_total_mib"`
	AvailableMiB   int  `json:"available_mib"`
	UsedMiB        int  `json:"used_mib"`
	// MemoryPressure is non-empty while the node is under memory
	// pressure, and says why: no new sandbox is placed there.
	MemoryPressure string `json:"memory_pressure,omitempty"`
}

// WarmPoolStatus is one kind of prepared sandbox on a node.
type WarmPoolStatus struct {
	Template  string `json:"template"`
	Runtime   string `json:"runtime"`
	CPUs      int    `json:"cpus"`
	MemoryMiB int    `json:"memory_mib"`
	// Ready are prepared and unclaimed; Filling are being prepared.
	Ready   int `json:"ready"`
	Filling int `json:"filling"`
	// Hits and Misses count the creates that claimed one or found none
	// since the node started.
	Hits   uint64 `json:"hits"`
	Misses uint64 `json:"misses"`
	// MemoryBytes is what the ready ones hold together.
	MemoryBytes uint64 `json:"memory_bytes"`
}

// NodeList is the body of GET /v1/nodes.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}

// SigningKey is one of the control plane's capability signing keys (admin).
type SigningKey struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	// ActiveAt is when it signs first; a rotated-in key is published to the
	// nodes before.
	ActiveAt time.Time `json:"active_at"`
	// Signing reports whether it signs now.
	Signing bool `json:"signing"`
	// RetiredAt is when a newer key took over; DroppedAt when it stopped
	// verifying (its capabilities had all expired).
	RetiredAt *time.Time `json:"retired_at,omitempty"`
	DroppedAt *time.Time `json:"dropped_at,omitempty"`
}

// SigningKeyList is the body of GET /v1/signing-keys.
type SigningKeyList struct {
	// Version is the key set's version the nodes hold.
	Version uint64       `json:"version"`
	Keys    []SigningKey `json:"keys"`
}

// Readiness is the body of GET /readyz: whether a create that names no
// template and no runtime would be placed at once (200), and if not (503)
// what it would wait for. GET /healthz answers 200 as soon as the server
// serves; creates issued before it is ready wait (bounded) for it.
type Readiness struct {
	// Ready is true when the default template is ready and a live node
	// offers the default runtime.
	Ready bool `json:"ready"`
	// Template and Runtime are the defaults judged ("auto" resolved).
	Template string `json:"template"`
	Runtime  string `json:"runtime,omitempty"`
	// NotReady says, one line each, what is not ready.
	NotReady []string `json:"not_ready,omitempty"`
}
