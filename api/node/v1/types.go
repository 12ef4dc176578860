// Package nodev1 holds the Go types of the node API between the control plane
// and a node's sandbox manager (node-api). The contract itself is the Connect
// services of nodeapi (node.proto: what the control plane asks of a node;
// controlplane.proto: what a node asks of the control plane); wire.go converts
// these types to and from its messages. Some of these types are also kept on
// disk as JSON (a node's runtime records, the artifacts of a snapshot in the
// store), hence their tags. The node answers on a unix socket or a TCP address
// and checks the node token (X-Space-Node-Token) it sent in its heartbeat.
package nodev1

import (
	"encoding/json"
	"time"
)

// Info describes a node (NodeService.Info).
type Info struct {
	NodeID    string   `json:"node_id"`
	Runtimes  []string `json:"runtimes"`
	Storage   string   `json:"storage"`
	CPUs      int      `json:"cpus"`
	MemoryMiB int      `json:"memory_mib"`
}

// StartExecution asks a node to start an execution (ExecutionService.Start).
type StartExecution struct {
	ExecID       string `json:"exec_id"`
	SandboxID    string `json:"sandbox_id"`
	Generation   uint64 `json:"generation"`
	ActivationID string `json:"activation_id"`
	Template     string `json:"template"`
	Runtime      string `json:"runtime"`
	CPUs         int    `json:"cpus"`
	MemoryMiB    int    `json:"memory_mib"`
	// DiskMiB bounds what the execution writes to its root filesystem
	// beyond the template or snapshot it starts from (ns on btrfs; a vm's
	// disk is its image's size). 0, from a control plane older than the
	// field, means the default of 2048.
	DiskMiB int               `json:"disk_mib,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Snapshot, when set, starts the execution from this snapshot on the
	// node instead of the template (stop/start, rollback, fork, restore).
	Snapshot string `json:"snapshot,omitempty"`
	// TenantID owns the sandbox: the gateway resolves its credentials in
	// that scope.
	TenantID string `json:"tenant_id,omitempty"`
	// Egress is the sandbox's egress policy (internal/egress Spec JSON).
	// Empty means deny everything: the control plane always sends one.
	Egress json.RawMessage `json:"egress,omitempty"`
	// CA is the sandbox's interception CA (the guest trusts its
	// certificate): the gateway mints leaves with it for hosts that have a
	// credential rule. Absent: no credential injection.
	CA *SandboxCA `json:"ca,omitempty"`
	// NoActivity says the sandbox has no idle timeout: nothing needs to
	// know when its guest last served a request, so the node's heartbeats
	// do not ask (a guest round trip per execution every heartbeat).
	// False, as in requests and records from before it existed: asked.
	NoActivity bool `json:"no_activity,omitempty"`
}

// SandboxCA is a sandbox's interception CA, PEM encoded
// (sandboxca.Generate). The key travels only to the node that runs the
// sandbox and is kept there in memory.
type SandboxCA struct {
	CertPEM string `json:"cert_pem"`
	KeyPEM  string `json:"key_pem"`
}

// ResolveCredential is ControlPlaneService.ResolveCredential: a node's gateway asks
// the control plane for the credential to inject into one request an
// execution it runs is making to Host. The control plane checks that the
// execution is the sandbox's current one and runs on that node.
type ResolveCredential struct {
	SandboxID string `json:"sandbox_id"`
	ExecID    string `json:"exec_id"`
	Host      string `json:"host"`
	// CheckOnly asks only whether a credential applies to Host (the gateway
	// decides whether to intercept): no secret is returned, no rate limit
	// charged and no audit entry written.
	CheckOnly bool `json:"check_only,omitempty"`
	// Redaction, when set, reports instead that the gateway removed a
	// credential's secret from a response to the execution: the control
	// plane records it in the credential audit log and answers an empty
	// ResolvedCredential (Unavailable when the audit log cannot record it;
	// the gateway then cuts the response).
	Redaction *CredentialRedaction `json:"redaction,omitempty"`
}

// CredentialRedaction is one credential's secret found in a response from
// Host: which credential, where ("header", "body") and how many times.
type CredentialRedaction struct {
	CredentialID string `json:"credential_id"`
	Where        string `json:"where"`
	Count        int    `json:"count"`
}

// ResolvedCredential answers ResolveCredential. Errors: NotFound no
// credential in scope, PermissionDenied none allows the host,
// FailedPrecondition all expired, ResourceExhausted (rate_limited) rate
// limited, Unavailable store or audit log down.
type ResolvedCredential struct {
	// Applies answers a CheckOnly request.
	Applies bool `json:"applies"`
	// ID, Method, Name and Secret describe the credential to inject
	// (Method "header", "basic", "query" or "headers"; Name the header or
	// parameter, or for "headers" the comma-joined header names, whose
	// values Secret holds newline-joined in the same order).
	ID     string `json:"id,omitempty"`
	Method string `json:"method,omitempty"`
	Name   string `json:"name,omitempty"`
	Secret []byte `json:"secret,omitempty"`
}

// ExecState is a node's observation of an execution.
type ExecState string

// Observed execution states.
const (
	// ExecStarting: the node is still starting the execution.
	ExecStarting ExecState = "starting"
	ExecRunning  ExecState = "running"
	ExecFailed   ExecState = "failed"
)

// Execution is what a node reports of one execution it holds.
type Execution struct {
	ExecID       string    `json:"exec_id"`
	SandboxID    string    `json:"sandbox_id"`
	Generation   uint64    `json:"generation"`
	ActivationID string    `json:"activation_id"`
	Runtime      string    `json:"runtime"`
	Template     string    `json:"template"`
	State        ExecState `json:"state"`
	Reason       string    `json:"reason,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	// LastActivity is when the guest daemon last served a request (zero
	// when unknown); idle handling pauses a sandbox that has none for long.
	LastActivity time.Time `json:"last_activity,omitempty"`
	// Warm is set when the execution was a prepared one from the node's
	// warm pool, claimed for this sandbox, rather than started for it.
	Warm bool `json:"warm,omitempty"`
	// Fenced is set on an execution the node froze because the control
	// plane stopped answering its heartbeats: it stays frozen until the
	// control plane resumes it (its sandbox still runs here) or retires it
	// (a newer generation serves the sandbox elsewhere).
	Fenced bool `json:"fenced,omitempty"`
	// StartNotReady, set only in the answer to the Start that started the
	// execution, says why the template's start command was not ready when
	// the guest's Init returned (the execution runs anyway). Guest text,
	// escaped and bounded by the node; the server makes it a sandbox event.
	StartNotReady string `json:"start_not_ready,omitempty"`
}

// PoolKey names one kind of prepared execution in a node's warm pool: a
// create matches it exactly or not at all.
type PoolKey struct {
	Template  string `json:"template"`
	Runtime   string `json:"runtime"`
	CPUs      int    `json:"cpus"`
	MemoryMiB int    `json:"memory_mib"`
}

// PoolTarget is how many prepared executions of one key the control plane
// wants a node to keep ready. Version identifies the template build: a
// prepared execution of another version is drained, not handed out.
type PoolTarget struct {
	PoolKey
	Size    int    `json:"size"`
	Version string `json:"version"`
}

// PoolStatus is what a node has of one key: Ready executions wait to be
// claimed, Filling are being prepared. Hits and Misses count the creates
// that found one (or none) since the node started.
type PoolStatus struct {
	PoolKey
	Ready   int    `json:"ready"`
	Filling int    `json:"filling"`
	Hits    uint64 `json:"hits"`
	Misses  uint64 `json:"misses"`
	// MemoryBytes is the memory the ready executions hold together.
	MemoryBytes uint64 `json:"memory_bytes"`
}

// ExecStats is ExecutionService.Stats: what the execution
// uses now, measured on the host (the ns runtime's cgroup; for vm, the VMM's
// cgroup: guest memory as QEMU holds it, and the VMM's CPU time).
type ExecStats struct {
	Time time.Time `json:"time"`
	// CPUNanos is the CPU time consumed since the execution started.
	CPUNanos uint64 `json:"cpu_nanos"`
	// CPUs and MemoryLimitBytes are the execution's caps.
	CPUs             int    `json:"cpus"`
	MemoryBytes      uint64 `json:"memory_bytes"`
	MemoryLimitBytes uint64 `json:"memory_limit_bytes"`
	// MemoryCacheBytes is the page cache in MemoryBytes as the host
	// accounts it (ns: the cgroup's file pages); 0 for vm, whose guest
	// reports its own.
	MemoryCacheBytes uint64 `json:"memory_cache_bytes,omitempty"`
	Pids             uint64 `json:"pids"`
	// DiskBytes is what the execution's root filesystem is charged on the
	// node (ns: what it wrote beyond its template or snapshot, including
	// what its snapshots still hold; vm: what its disk image holds
	// allocated, the template's blocks included), DiskLimitBytes its limit
	// (ns: disk_mib; vm: the image's size); both absent where the node does
	// not account disks (an ns store without quotas).
	DiskBytes      uint64 `json:"disk_bytes,omitempty"`
	DiskLimitBytes uint64 `json:"disk_limit_bytes,omitempty"`
}

// TemplateReady answers TemplateService.Ensure.
type TemplateReady struct {
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes"`
	// Progress is the last reading of the build that made the template,
	// nil when it was already present.
	Progress *Progress `json:"progress,omitempty"`
}

// Error is the JSON body of an error on the node-api's plain HTTP routes
// (the guest and port proxies, the TCP upgrade, the metrics); Code is one
// of the sandboxv1 codes. The Connect routes answer Connect errors.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Reason refines Code (docs/api-errors.md lists them); empty for none.
	Reason string `json:"reason,omitempty"`
}

// TakeSnapshot asks for a snapshot of an execution (ExecutionService.TakeSnapshot).
type TakeSnapshot struct {
	SnapshotID string `json:"snapshot_id"`
	// Kind is "disk" (filesystem, taken while the sandbox runs) or "full"
	// (memory, devices and disk; vm only).
	Kind string `json:"kind"`
	// LeavePaused keeps the execution paused after a full snapshot.
	LeavePaused bool `json:"leave_paused,omitempty"`
}

// Snapshot is a snapshot held by a node.
type Snapshot struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	Runtime   string    `json:"runtime"`
	SandboxID string    `json:"sandbox_id"`
	Template  string    `json:"template"`
	CreatedAt time.Time `json:"created_at"`
	SizeBytes int64     `json:"size_bytes"`
	MemoryMiB int       `json:"memory_mib,omitempty"`
	CPUs      int       `json:"cpus,omitempty"`
}

// UploadSnapshot is SnapshotService.Upload: store
// the snapshot's artifacts in object storage, each encrypted under a fresh
// data key wrapped by the tenant's key.
type UploadSnapshot struct {
	Tenant string `json:"tenant"`
	// Prefix is the object key prefix of the snapshot's own artifacts
	// ("tenants/<tenant>/snapshots/<id>/").
	Prefix string `json:"prefix"`
	// SharedPrefix holds what the tenant's snapshots share (base streams,
	// boot files), content-addressed ("tenants/<tenant>/shared/").
	SharedPrefix string `json:"shared_prefix"`
	// KeyID is the tenant's KMS key.
	KeyID string `json:"key_id"`
}

// Object is one stored artifact.
type Object struct {
	// Name is the artifact's name in the snapshot's export.
	Name string `json:"name"`
	// Key is its object key; Size and Digest what the object store holds
	// (the encrypted bytes), for verification.
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
	// AAD is the additional data the artifact is sealed with.
	AAD string `json:"aad"`
}

// Artifacts is what an upload stored: everything any node needs to rebuild
// the snapshot.
type Artifacts struct {
	// Export is the node-manager's description of the artifacts (opaque to
	// the control plane, checked by the importing node-manager).
	Export json.RawMessage `json:"export"`
	// Objects lists every object, the shared ones included.
	Objects []Object `json:"objects"`
	// PlainBytes is the size of the artifacts before encryption and
	// StoredBytes what was written (objects that were already stored, the
	// shared ones, count as 0).
	PlainBytes  int64 `json:"plain_bytes"`
	StoredBytes int64 `json:"stored_bytes"`
}

// DownloadSnapshot is SnapshotService.Download:
// rebuild the snapshot on this node from object storage.
type DownloadSnapshot struct {
	Tenant    string    `json:"tenant"`
	Artifacts Artifacts `json:"artifacts"`
}

// Retirement tells a node that one of its executions no longer serves its
// sandbox (a newer generation does, or the sandbox is gone): the node refuses
// the execution's capabilities with RefreshRoute and cuts its streams at
// once, before the execution itself is stopped.
type Retirement struct {
	ExecID    string `json:"exec_id"`
	SandboxID string `json:"sandbox_id"`
	// Generation is the sandbox's current generation (0: deleted).
	Generation uint64 `json:"generation"`
}

// Progress is one reading of a long operation (internal/progress Report).
type Progress struct {
	// Phase is "build", "upload" or "download".
	Phase   string `json:"phase"`
	Message string `json:"message,omitempty"`
	// Done and Total count Unit ("bytes" or "steps"); Total is 0 when unknown.
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"`
	Unit  string `json:"unit,omitempty"`
	// Rate is Done per second since the operation began.
	Rate  float64 `json:"rate,omitempty"`
	Final bool    `json:"final,omitempty"`
}

// Orphans answers NodeService.CollectOrphans: the executions the node's
// runtimes hold that no runtime record of the node refers to (stopped and
// released unless it was a dry run).
type Orphans struct {
	Orphans []Orphan `json:"orphans"`
	// Pending names the runtimes still being set up on the node, whose
	// executions were not looked at.
	Pending []string `json:"pending,omitempty"`
}

// Orphan is an execution no runtime record refers to.
type Orphan struct {
	ExecID  string `json:"exec_id"`
	Runtime string `json:"runtime"`
	// VolumeOnly: only the execution's root volume is left, no runtime
	// holds it (Runtime is empty); cleaning it deletes the volume.
	VolumeOnly bool `json:"volume_only,omitempty"`
	// Cleaned says it was stopped and cleaned up; Error why not.
	Cleaned bool   `json:"cleaned"`
	Error   string `json:"error,omitempty"`
}

// VersionHeader is the response header by which both ends of node API v2
// (the Connect services) say which version they speak: every answer of a
// node's or a control plane's Connect routes carries it, Version as its
// value. An answer without it comes from a peer of node API v1 (JSON
// routes), which the other end refuses with a message that says which side
// to upgrade.
const VersionHeader = "Space-Node-Api"

// Version is the version of the node API this package describes.
const Version = "2"
