package sandboxv1

import "time"

// Snapshot kinds (ARCHITECTURE.md §5).
const (
	// SnapshotDisk is a point-in-time copy of the sandbox filesystem.
	SnapshotDisk = "disk"
	// SnapshotFull is a checkpoint of a paused sandbox: memory, device state and disk.
	SnapshotFull = "full"
)

// Snapshot is one snapshot of a sandbox, as GET and POST /v1/sandboxes/{id}/snapshots report it.
type Snapshot struct {
	ID        string    `json:"id"`
	Sandbox   string    `json:"sandbox"`
	Kind      string    `json:"kind"`  // SnapshotDisk or SnapshotFull
	Tier      string    `json:"tier"`  // retention tier, e.g. "manual", "10m", "hourly", "daily"
	State     string    `json:"state"` // "creating", "ready", "failed"
	Reason    string    `json:"reason,omitempty"`
	SizeBytes int64     `json:"size_bytes,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Names are the snapshot's names (unique within the tenant; see
	// CreateSnapshotRequest.Name).
	Names []string `json:"names,omitempty"`
}

// SnapshotList is the body of GET /v1/sandboxes/{id}/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// CreateSnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots. Kind
// defaults to SnapshotDisk.
type CreateSnapshotRequest struct {
	Kind string `json:"kind,omitempty"`
	// Name, when set, names the snapshot: unique within the tenant (naming
	// another snapshot moves the name there), a template name's shape, not
	// a template's name. It is how a Dockerfile build labels a cached step.
	Name string `json:"name,omitempty"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork. Without Snapshot the
// fork starts from the sandbox's current filesystem.
type ForkRequest struct {
	Snapshot string `json:"snapshot,omitempty"`
	Name     string `json:"name,omitempty"`
}

// RollbackRequest is the body of POST /v1/sandboxes/{id}/rollback.
type RollbackRequest struct {
	Snapshot string `json:"snapshot"`
}

// RestoreRequest is the optional body of POST /v1/sandboxes/{id}/restore.
type RestoreRequest struct {
	// Node places the restored sandbox on that node (admin keys only; it
	// must be live, offer the runtime and have room). Empty: the
	// scheduler's choice.
	Node string `json:"node,omitempty"`
}

// ExposePortRequest is the body of POST /v1/sandboxes/{id}/ports.
type ExposePortRequest struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol,omitempty"` // "http" (default) or "tcp"
	// Public ports are reachable by anyone who knows the URL; a private one
	// (the default) needs the tenant's API key or the port's token.
	Public bool `json:"public,omitempty"`
}

// PortTokenHeader carries a private port's access token on ingress
// requests; the query parameter PortTokenQuery is the alternative for
// clients that cannot set headers (browsers). Neither reaches the guest.
const (
	PortTokenHeader = "X-Space-Port-Token"
	PortTokenQuery  = "space_port_token"
)

// WebSocket subprotocols of a browser client, which cannot set the
// Authorization header on a WebSocket: ExecSubprotocol is what the exec
// stream selects and echoes; WSBearerPrefix+key carries the API key in the
// handshake and is never echoed, nor forwarded into a sandbox.
const (
	ExecSubprotocol = "space.exec.v1"
	WSBearerPrefix  = "space.bearer."
)

// Header routing, for clients on localhost without the ingress domain's
// DNS that cannot change the path: a request to the API listener with both
// headers goes to that sandbox's port, with its path as sent. Neither
// reaches the guest.
const (
	SandboxHeader = "X-Space-Sandbox"
	PortHeader    = "X-Space-Port"
)

// TCPUpgrade is the Upgrade token of a raw TCP tunnel to a sandbox port:
// GET /v1/sandboxes/{id}/ports/{port}/tcp with "Connection: Upgrade" and
// "Upgrade: space-tcp" answers 101, then carries the bytes both ways.
const TCPUpgrade = "space-tcp"

// ServicePort is an exposed sandbox port and the URL that reaches it through the gateway.
type ServicePort struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol"`
	Public   bool   `json:"public"`
	// URL reaches the port: for http, http://{port}-{sandbox}.{ingress
	// domain}[:{api port}]/ (routed by Host); for tcp, the tunnel endpoint
	// of the API that `space port forward` uses.
	URL string `json:"url"`
	// ProxyURL reaches an http port through the API's own host name, for
	// clients without the ingress domain's DNS: /v1/sandboxes/{id}/ports/{port}/proxy/.
	ProxyURL string `json:"proxy_url,omitempty"`
	// Token is the access token of a private port, only in the answer of
	// POST /v1/sandboxes/{id}/ports: send it in X-Space-Port-Token (or the
	// space_port_token query parameter). It is stored hashed; exposing the
	// port again replaces it.
	Token     string    `json:"token,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// ServicePortList is the body of GET /v1/sandboxes/{id}/ports (no tokens).
type ServicePortList struct {
	Ports []ServicePort `json:"ports"`
}

// Event is one entry of a sandbox's history.
type Event struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	Type    string    `json:"type"` // "state", "scheduled", "snapshot", "progress", "failed", ...
	Message string    `json:"message"`
	// Progress is set on "progress" events: a reading of a snapshot's
	// upload (hibernate) or download (restore).
	Progress *Progress `json:"progress,omitempty"`
}

// Progress is one reading of a long operation: a template build, a
// snapshot's upload or download.
type Progress struct {
	// Phase is "build", "upload" or "download".
	Phase string `json:"phase"`
	// Message is the latest human-readable line (a build's output, the
	// artifact being sent).
	Message string `json:"message,omitempty"`
	// Done and Total count Unit ("bytes" or "steps"); Total is absent
	// when it is not known.
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"`
	Unit  string `json:"unit,omitempty"`
	// Rate is Done per second since the operation began.
	Rate float64 `json:"rate,omitempty"`
	// Final marks the last reading of the phase.
	Final bool `json:"final,omitempty"`
}

// EventList is the body of GET /v1/sandboxes/{id}/events.
type EventList struct {
	Events []Event `json:"events"`
}

// Metric is one sample of a sandbox's use, as GET
// /v1/sandboxes/{id}/metrics answers it: what the control plane sampled
// over the sandbox's life (a bounded history, older samples merged), and a
// sample taken at the request while it runs. Bytes are bytes.
type Metric struct {
	Time     time.Time `json:"time"`
	CPUCount int       `json:"cpu_count"`
	// CPUUsedPct is the CPU time used over SpanSeconds, per allowed CPU.
	CPUUsedPct    float64 `json:"cpu_used_pct"`
	MemUsedBytes  uint64  `json:"mem_used_bytes"`
	MemTotalBytes uint64  `json:"mem_total_bytes"`
	// DiskUsedBytes and DiskTotalBytes are the root volume's use and
	// limit; absent where the node does not account the disk.
	DiskUsedBytes  *uint64 `json:"disk_used_bytes,omitempty"`
	DiskTotalBytes *uint64 `json:"disk_total_bytes,omitempty"`
	// SpanSeconds is the time the sample covers (merged samples cover
	// more).
	SpanSeconds float64 `json:"span_seconds"`
}

// MetricList is the body of GET /v1/sandboxes/{id}/metrics, oldest first.
type MetricList struct {
	Metrics []Metric `json:"metrics"`
}
