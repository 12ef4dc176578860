// Package store defines the contract of SPACE's durable state: tenants, API
// keys, sandboxes (desired and observed state), templates, nodes, idempotency
// records and sandbox events. The control plane is stateless; everything it
// must remember across a crash goes through a Store.
//
// Implementations live in subpackages (sqlite/, postgres/) and share one
// schema (migrations/), one implementation of the tables over a small SQL
// executor (sqlstore/: each backend brings its connections, transactions
// and dialect) and one conformance suite (storetest/). Errors are
// classed with internal/errdefs: a missing row is ErrNotFound, a duplicate or a
// stale Version is ErrConflict.
//
// The contract is split by concern into small interfaces so that a consumer can
// name only what it uses (the node registry needs Nodes, not Tenants); Store
// is all of them together, which is what a backend provides.
package store

import (
	"context"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
)

// Store is the whole contract a backend implements.
type Store interface {
	Tenants
	APIKeys
	Sandboxes
	Templates
	Nodes
	NodeReports
	Idempotency
	Events
	Snapshots
	SnapshotNames
	Credentials
	ServicePorts
	Leases
	MetricHistory
	TemplateBuilds
	// Close releases the backend's connections.
	Close() error
}

// Tenant is one customer; every sandbox and key belongs to one.
type Tenant struct {
	ID        string
	Name      string
	CreatedAt time.Time
	// Quota bounds what the tenant's sandboxes may hold at once; the zero
	// Quota is unlimited. CreateTenant stores it; SetTenantQuota changes it.
	Quota Quota
}

// Tenants stores tenants.
type Tenants interface {
	// CreateTenant stores a new tenant. A duplicate id is ErrConflict.
	CreateTenant(ctx context.Context, t Tenant) error
	// GetTenant returns one tenant or ErrNotFound.
	GetTenant(ctx context.Context, id string) (Tenant, error)
	// ListTenants returns every tenant, oldest first.
	ListTenants(ctx context.Context) ([]Tenant, error)
	// DeleteTenant deletes a tenant and its API keys. It is ErrConflict while
	// the tenant still has sandboxes and ErrNotFound when it does not exist.
	DeleteTenant(ctx context.Context, id string) error
	// SetTenantQuota replaces a tenant's quota. Lowering it below the
	// tenant's usage stops nothing that runs; it refuses what would start.
	// An unknown tenant is ErrNotFound, an invalid quota ErrInvalidArgument.
	SetTenantQuota(ctx context.Context, id string, q Quota) error
	// TenantUsage returns what the tenant's sandboxes that hold resources
	// (HoldsResources) use together; an unknown tenant is ErrNotFound.
	TenantUsage(ctx context.Context, id string) (Usage, error)
}

// APIKey is the stored form of an API key: never the secret, only its hash
// (see internal/apikey).
type APIKey struct {
	ID     string
	Tenant string
	// Hash is apikey.Key.Hash() of the key.
	Hash  string
	Admin bool
	// CreatedAt is when the key was minted.
	CreatedAt time.Time
	// RevokedAt is when the key was revoked; zero while it is valid.
	RevokedAt time.Time
}

// Revoked reports whether the key has been revoked.
func (k APIKey) Revoked() bool { return !k.RevokedAt.IsZero() }

// APIKeys stores API keys.
type APIKeys interface {
	// CreateAPIKey stores a key. An unknown tenant is ErrNotFound, a duplicate
	// id ErrConflict.
	CreateAPIKey(ctx context.Context, k APIKey) error
	// GetAPIKey returns a key by id, revoked or not, or ErrNotFound. The caller
	// refuses a revoked key (APIKey.Revoked).
	GetAPIKey(ctx context.Context, id string) (APIKey, error)
	// ListAPIKeys returns the tenant's keys, oldest first.
	ListAPIKeys(ctx context.Context, tenant string) ([]APIKey, error)
	// RevokeAPIKey marks a key revoked at the given time; the next GetAPIKey
	// reports it. Revoking a revoked key keeps the first time and succeeds.
	RevokeAPIKey(ctx context.Context, id string, at time.Time) error
}

// SandboxFilter selects sandboxes in ListSandboxes. Empty fields match all.
type SandboxFilter struct {
	Tenant string
	Node   string
}

// Sandboxes stores sandbox records with optimistic concurrency: every write
// checks and increments sandbox.Sandbox.Version.
type Sandboxes interface {
	// CreateSandbox stores a new sandbox and sets sb.Version to 1 and
	// sb.UpdatedAt. An unknown tenant is ErrNotFound, a duplicate id
	// ErrConflict.
	CreateSandbox(ctx context.Context, sb *sandbox.Sandbox) error
	// GetSandbox returns the tenant's sandbox. A sandbox of another tenant is
	// ErrNotFound, exactly like a missing one, so existence never leaks.
	GetSandbox(ctx context.Context, tenant, id string) (*sandbox.Sandbox, error)
	// GetSandboxByID returns a sandbox whatever its tenant, for the control
	// plane's own use (reconciler, node reports), never for a client request.
	GetSandboxByID(ctx context.Context, id string) (*sandbox.Sandbox, error)
	// ListSandboxes returns the sandboxes matching f, oldest first.
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]*sandbox.Sandbox, error)
	// UpdateSandbox writes sb if the stored Version equals sb.Version, then
	// increments sb.Version and sets sb.UpdatedAt. A different stored Version
	// is ErrConflict (re-read and retry); a missing row is ErrNotFound. ID,
	// Tenant and CreatedAt never change.
	UpdateSandbox(ctx context.Context, sb *sandbox.Sandbox) error
	// DeleteSandbox removes the row once the sandbox is gone everywhere. A
	// missing row is ErrNotFound.
	DeleteSandbox(ctx context.Context, id string) error
	// CreateSandboxWithinQuota is CreateSandbox admitting sb under its
	// tenant's quota: in the same transaction it first checks that the
	// tenant's usage plus sb (when sb's state holds resources) stays within
	// every limit; otherwise nothing is written and the error is a
	// *QuotaError (ErrResourceExhausted). Admissions serialize with every
	// other write of the store, whichever replica makes them: of two creates
	// racing for a tenant's last slot exactly one succeeds.
	// In the same transaction it checks that sb's template still exists (the
	// caller read it before, and DeleteTemplate may have deleted it since): a
	// template gone is ErrNotFound and nothing is written.
	CreateSandboxWithinQuota(ctx context.Context, sb *sandbox.Sandbox) error
	// UpdateSandboxWithinQuota is UpdateSandbox with the same admission when
	// the update moves sb from a stored state that holds no resources into
	// one that does (a start after a stop, a restore after a hibernate);
	// any other update is written as UpdateSandbox writes it.
	UpdateSandboxWithinQuota(ctx context.Context, sb *sandbox.Sandbox) error
}

// TemplateState is where a template build is.
type TemplateState string

// Template build states.
const (
	TemplateBuilding TemplateState = "building"
	TemplateReady    TemplateState = "ready"
	TemplateFailed   TemplateState = "failed"
)

// Template is a named root filesystem sandboxes are created from.
type Template struct {
	Name string
	// Source is what the template was built from ("dir:/p", "debootstrap:bookworm").
	Source    string
	State     TemplateState
	Reason    string
	SizeBytes int64
	// Egress is the default egress policy (egress Spec JSON) of sandboxes
	// made from the template; "" for none. UpdateTemplate leaves it alone:
	// SetTemplateEgress changes it.
	Egress string
	// Progress is the build's latest reading (JSON of an internal/progress
	// Report), "" before the first. UpdateTemplate leaves it alone:
	// SetTemplateProgress changes it.
	Progress string
	// Node is the one node that holds the template when it was built from
	// a source only that node had (snapshot:ID); "" when every node can
	// build it from Source. New executions of the template go there.
	Node      string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Templates stores template records (the files live on nodes).
type Templates interface {
	// CreateTemplate stores a new template; an existing name is ErrConflict.
	CreateTemplate(ctx context.Context, t Template) error
	// SetTemplateEgress replaces a template's default egress policy (""
	// removes it); an unknown template is ErrNotFound.
	SetTemplateEgress(ctx context.Context, name, egress string) error
	// SetTemplateProgress replaces a template build's latest reading (JSON);
	// an unknown template is ErrNotFound.
	SetTemplateProgress(ctx context.Context, name, progress string) error
	// GetTemplate returns a template or ErrNotFound.
	GetTemplate(ctx context.Context, name string) (Template, error)
	// ListTemplates returns every template by name.
	ListTemplates(ctx context.Context) ([]Template, error)
	// UpdateTemplate overwrites source, state, reason, size and node of an existing
	// template and sets UpdatedAt; a missing one is ErrNotFound.
	UpdateTemplate(ctx context.Context, t Template) error
	// DeleteTemplate deletes a template. It is ErrConflict while a sandbox
	// still uses it and ErrNotFound when it does not exist.
	DeleteTemplate(ctx context.Context, name string) error
}

// NodeState is whether a node takes new sandboxes.
type NodeState string

// Node states.
const (
	NodeReady    NodeState = "ready"
	NodeDraining NodeState = "draining"
	NodeDown     NodeState = "down"
)

// Resources is an amount of compute a node offers or a sandbox uses.
type Resources struct {
	CPUs      int
	MemoryMiB int
	DiskMiB   int
}

// Node is one machine running SPACE's node services.
type Node struct {
	ID string
	// Address is where the control plane reaches the node's API.
	Address  string
	Capacity Resources
	// Runtimes lists the runtime drivers the node offers ("ns", "vm").
	Runtimes      []string
	State         NodeState
	RegisteredAt  time.Time
	LastHeartbeat time.Time
}

// Nodes stores the node registry.
type Nodes interface {
	// PutNode registers a node or replaces its record (address, capacity,
	// runtimes, state, heartbeat); RegisteredAt is kept from the first put.
	PutNode(ctx context.Context, n Node) error
	// GetNode returns a node or ErrNotFound.
	GetNode(ctx context.Context, id string) (Node, error)
	// ListNodes returns every node by id.
	ListNodes(ctx context.Context) ([]Node, error)
	// NodeUsage returns what the sandboxes that hold resources
	// (HoldsResources) use together on each node, by node id; a node none
	// is placed on is absent. It is what placement adds up, read as one
	// aggregate instead of every sandbox's row.
	NodeUsage(ctx context.Context) (map[string]Usage, error)
	// Heartbeat records that the node was alive at the given time; an unknown
	// node is ErrNotFound (it must register first).
	Heartbeat(ctx context.Context, id string, at time.Time) error
	// DeleteNode removes a node; a missing one is ErrNotFound.
	DeleteNode(ctx context.Context, id string) error
	// RecordHeartbeat registers node n or refreshes its record (address,
	// runtimes, capacity, heartbeat time n.LastHeartbeat) in one atomic
	// step, and returns the state the node was in just before ("" when it
	// was not registered). A draining node stays draining; a down or new
	// node becomes ready; a ready one stays ready. n.State is ignored;
	// RegisteredAt is kept from the first registration.
	RecordHeartbeat(ctx context.Context, n Node) (previous NodeState, err error)
}

// MaxNodeReportBytes bounds what one NodeReport stores (its sealed token and
// execution list together).
const MaxNodeReportBytes = 4 << 20

// NodeReport is what a node last told the control plane, kept in the store
// so that every replica shares it whichever one received the heartbeat.
type NodeReport struct {
	Node string
	// SealedToken is the node's API token sealed by the control plane with
	// the key all replicas share; the store never sees the token itself.
	SealedToken string
	// Executions is the node's execution list as JSON the control plane
	// owns.
	Executions string
	// ReportedAt is when a replica received the report.
	ReportedAt time.Time
}

// NodeReports stores the last report of each node. A node's report goes
// with its node (DeleteNode).
type NodeReports interface {
	// PutNodeReport stores r as its node's report unless the stored one is
	// newer (a heartbeat a slow replica handles late never replaces a newer
	// one; the older report is dropped without error). An unknown node is
	// ErrNotFound; a report larger than MaxNodeReportBytes, or without a
	// node or a time, ErrInvalidArgument.
	PutNodeReport(ctx context.Context, r NodeReport) error
	// GetNodeReport returns a node's report or ErrNotFound.
	GetNodeReport(ctx context.Context, node string) (NodeReport, error)
	// ListNodeReports returns every node's report by node id.
	ListNodeReports(ctx context.Context) ([]NodeReport, error)
	// MarkNodeDown moves node id to NodeDown if it is not down and its last
	// heartbeat is before silentSince, and reports whether it did. Of
	// replicas that race to declare a node lost, exactly one gets true; a
	// node that heartbeats again is put back by PutNode. An unknown node is
	// ErrNotFound.
	MarkNodeDown(ctx context.Context, id string, silentSince time.Time) (bool, error)
}

// IdempotencyRecord is the remembered outcome of a POST carrying an
// Idempotency-Key.
type IdempotencyRecord struct {
	Tenant string
	Key    string
	// Fingerprint identifies the request (the server hashes method, path and
	// body); a replay with another fingerprint is a client error.
	Fingerprint string
	Status      int
	Body        []byte
	CreatedAt   time.Time
}

// Idempotency stores idempotency records.
type Idempotency interface {
	// PutIdempotency stores rec unless a record for (Tenant, Key) exists. If
	// one exists with the same Fingerprint it is returned and the caller
	// replays it; with another Fingerprint the result is ErrConflict. On
	// success the stored record (rec itself) is returned.
	PutIdempotency(ctx context.Context, rec IdempotencyRecord) (IdempotencyRecord, error)
	// GetIdempotency returns the record for (tenant, key) or ErrNotFound.
	GetIdempotency(ctx context.Context, tenant, key string) (IdempotencyRecord, error)
	// DeleteIdempotencyBefore removes records created before t and returns how
	// many it removed.
	DeleteIdempotencyBefore(ctx context.Context, t time.Time) (int, error)
}

// Event is one entry in a sandbox's append-only history.
type Event struct {
	// Seq orders a sandbox's events; the store assigns it (1, 2, …).
	Seq       int64
	SandboxID string
	Time      time.Time
	// Type is a short machine word ("state", "scheduled", "failed").
	Type    string
	Message string
	// Progress is the reading of a "progress" event (JSON of an
	// internal/progress Report), "" for other events.
	Progress string
}

// Events stores sandbox events. Events outlive their sandbox's row.
type Events interface {
	// AppendEvent adds an event to its sandbox's history and returns it with
	// Seq assigned.
	AppendEvent(ctx context.Context, e Event) (Event, error)
	// ListEvents returns a sandbox's events in order; none is an empty list.
	ListEvents(ctx context.Context, sandboxID string) ([]Event, error)
}

// SnapshotKind is what a snapshot holds.
type SnapshotKind string

// Snapshot kinds.
const (
	// SnapshotDisk is the sandbox's filesystem, taken while it runs.
	SnapshotDisk SnapshotKind = "disk"
	// SnapshotFull is memory, device state and filesystem (vm only).
	SnapshotFull SnapshotKind = "full"
)

// SnapshotState is where a snapshot is in its life.
type SnapshotState string

// Snapshot states. A snapshot is usable (rollback, fork, restore) only when
// ready; creating ones are taken by the reconciler, deleting ones removed
// from their node (and object storage) before the row goes.
const (
	SnapshotCreating SnapshotState = "creating"
	SnapshotReady    SnapshotState = "ready"
	SnapshotFailed   SnapshotState = "failed"
	SnapshotDeleting SnapshotState = "deleting"
)

// Snapshot is the record of one snapshot of a sandbox.
type Snapshot struct {
	ID        string
	SandboxID string
	Tenant    string
	Kind      SnapshotKind
	// Tier says why it exists: "manual" (asked for), "stop", "fork",
	// "hibernate", or a schedule tier ("10m", "1h", "24h").
	Tier  string
	State SnapshotState
	// Reason says why it failed.
	Reason string
	// Node holds the snapshot's files; empty once they live only in object
	// storage.
	Node string
	// Runtime, Template, CPUs and MemoryMiB are those of the sandbox when
	// it was taken; a full snapshot restores only at the same size.
	Runtime   string
	Template  string
	CPUs      int
	MemoryMiB int
	// Generation is the sandbox execution it was taken from.
	Generation uint64
	// SizeBytes is what its files hold, once ready.
	SizeBytes int64
	// Artifacts describes the snapshot's objects in object storage, as JSON
	// the lifecycle code owns (empty while node-local only).
	Artifacts string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// SnapshotName is a tenant's name for one of its snapshots (E2B's named
// snapshots): unique within the tenant.
type SnapshotName struct {
	Tenant     string
	Name       string
	SnapshotID string
	// CreatedAt is when the name was last given (to this snapshot).
	CreatedAt time.Time
}

// SnapshotNames stores snapshot names. Deleting a snapshot deletes its
// names.
type SnapshotNames interface {
	// SetSnapshotName gives name to snapshot n.SnapshotID of tenant
	// n.Tenant, taking it from the tenant's snapshot that held it. A
	// snapshot that is not the tenant's is ErrNotFound.
	SetSnapshotName(ctx context.Context, n SnapshotName) error
	// GetSnapshotName returns tenant's name or ErrNotFound.
	GetSnapshotName(ctx context.Context, tenant, name string) (SnapshotName, error)
	// ListSnapshotNames returns tenant's names, by name.
	ListSnapshotNames(ctx context.Context, tenant string) ([]SnapshotName, error)
}

// SnapshotFilter selects snapshots in ListSnapshots. Empty fields match all.
type SnapshotFilter struct {
	SandboxID string
	Tenant    string
	State     SnapshotState
}

// Snapshots stores snapshot records. Unlike sandboxes they have no version:
// the reconciler is their only writer after creation.
type Snapshots interface {
	// CreateSnapshot stores a new snapshot; a duplicate id is ErrConflict.
	CreateSnapshot(ctx context.Context, s Snapshot) error
	// GetSnapshot returns a snapshot or ErrNotFound. With tenant non-empty a
	// snapshot of another tenant is ErrNotFound.
	GetSnapshot(ctx context.Context, tenant, id string) (Snapshot, error)
	// ListSnapshots returns the snapshots matching f, oldest first (by
	// CreatedAt, then id).
	ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error)
	// ListUnsettledSnapshots returns the snapshots of every sandbox that
	// still ask for work (state creating or deleting), oldest first (by
	// CreatedAt, then id): one query where the reconciler's resync would
	// otherwise list each sandbox's.
	ListUnsettledSnapshots(ctx context.Context) ([]Snapshot, error)
	// UpdateSnapshot overwrites state, reason, node, size and artifacts of an
	// existing snapshot and sets UpdatedAt; a missing one is ErrNotFound.
	UpdateSnapshot(ctx context.Context, s Snapshot) error
	// DeleteSnapshot removes the row; a missing one is ErrNotFound.
	DeleteSnapshot(ctx context.Context, id string) error
}

// Credential is the control plane's index entry of one credential: who owns
// it and its metadata, never its secret (that lives in the credential
// backend, internal/credentials).
type Credential struct {
	ID      string
	Tenant  string
	Project string
	Sandbox string
	Name    string
	// Metadata is the credential's metadata as JSON the server owns
	// (injection, allowed hosts, expiry, rate limit).
	Metadata  string
	CreatedAt time.Time
}

// Credentials stores the credential index.
type Credentials interface {
	// CreateCredential stores a new entry; a duplicate id is ErrConflict.
	CreateCredential(ctx context.Context, c Credential) error
	// GetCredential returns the tenant's entry; another tenant's is
	// ErrNotFound, exactly like a missing one.
	GetCredential(ctx context.Context, tenant, id string) (Credential, error)
	// ListCredentials returns the tenant's entries, oldest first (by
	// CreatedAt, then id).
	ListCredentials(ctx context.Context, tenant string) ([]Credential, error)
	// DeleteCredential removes an entry; a missing one is ErrNotFound.
	DeleteCredential(ctx context.Context, id string) error
}

// ServicePort is one exposed port of a sandbox (ServicePort ingress).
type ServicePort struct {
	Sandbox string
	// Port is the guest port, 1-65535, or 0 for the rule of a sandbox made
	// through the E2B API that covers every HTTP port not exposed itself
	// (internal/server/e2b_traffic.go).
	Port int
	// Protocol is what the ingress speaks to the port: "http" or "tcp".
	Protocol string
	// Public ports need no credentials; a private one needs the tenant's API
	// key or the port's access token, whose hex SHA-256 is TokenHash (""
	// for a public port).
	Public    bool
	TokenHash string
	// HostMask is the Host header the ingress sends to the port in place of
	// the request's own, "${PORT}" replaced with the port number (E2B's
	// network.maskRequestHost); "" sends the request's Host as it came.
	HostMask  string
	CreatedAt time.Time
}

// ServicePorts stores the exposed ports of sandboxes. Deleting a sandbox
// deletes its ports.
type ServicePorts interface {
	// PutServicePort stores p, replacing the sandbox's entry for the same
	// port; an unknown sandbox is ErrNotFound.
	PutServicePort(ctx context.Context, p ServicePort) error
	// GetServicePort returns one entry; a missing one is ErrNotFound.
	GetServicePort(ctx context.Context, sandbox string, port int) (ServicePort, error)
	// ListServicePorts returns the sandbox's entries by port.
	ListServicePorts(ctx context.Context, sandbox string) ([]ServicePort, error)
	// DeleteServicePort removes an entry; a missing one is ErrNotFound.
	DeleteServicePort(ctx context.Context, sandbox string, port int) error
}

// Lease is a time-limited exclusive claim on a name, held by one holder (a
// control-plane replica electing a leader, a worker owning a shard).
type Lease struct {
	Name   string
	Holder string
	// Token is the fencing token: it grows with every acquisition of the
	// name by a new holder (or after the lease expired) and never goes back,
	// even across ReleaseLease. A holder passes it along with the work it
	// does under the lease, so a write carrying an older token is recognised
	// as coming from a holder that lost the lease.
	Token int64
	// Expires is when the lease lapses unless renewed, by the store's clock
	// (the database server's for PostgreSQL, so replicas whose clocks drift
	// still agree).
	Expires time.Time
}

// Leases stores leases. Holder names must be unique per process
// incarnation: a restarted process that reused its predecessor's name would
// inherit its live lease and token.
type Leases interface {
	// AcquireLease takes the lease name for holder until ttl from now. It
	// succeeds when nobody holds the lease, when its holder let it expire or
	// released it (then with a greater Token than any before), or when
	// holder already holds it (then it is renewed, Token unchanged). While
	// another holder's lease is live it is ErrConflict, a *LeaseHeldError.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (Lease, error)
	// RenewLease extends l until ttl from now and returns it with the new
	// Expires. It is ErrConflict when l is no longer the current lease of its
	// name (someone else acquired it after it expired, or it was released):
	// the caller lost the lease and must stop the work it guards. A lease
	// that expired without anyone taking it is renewed. An unknown name is
	// ErrNotFound.
	RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	// ReleaseLease gives l up so that another holder may take it at once.
	// Releasing a released lease succeeds; it is ErrConflict when another
	// holder has acquired the name since, and ErrNotFound for an unknown
	// name.
	ReleaseLease(ctx context.Context, l Lease) error
	// TakeOverLease moves the lease name from holder from (its lease live
	// or expired) to holder to, until ttl from now: the caller found from
	// gone (Presence) and need not wait for the lease to expire. It
	// is refused with ErrConflict unless from still holds the lease; the
	// new lease has a greater Token, exactly as one acquired after expiry,
	// so from's renewals and fenced writes are refused from then on. An
	// unknown name is ErrNotFound.
	TakeOverLease(ctx context.Context, name, from, to string, ttl time.Duration) (Lease, error)
}
