package e2bapi

import (
	"encoding/json"
	"maps"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
)

// The E2B REST API's JSON shapes (e2b-dev/infra spec/openapi.yml), with
// E2B's field names.

// e2bNewSandbox is the body of POST /sandboxes. Unknown fields are
// ignored, as E2B's server does; fields SPACE cannot honour are refused
// (e2bUnsupported).
type e2bNewSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Secure              *bool             `json:"secure"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	Network      json.RawMessage `json:"network"`
	VolumeMounts []any           `json:"volumeMounts"`
	MCP          map[string]any  `json:"mcp"`
	// IAM is E2B's workload identity (named tokens its egress proxy mints
	// into rules' headers): refused when it asks for any (e2bUnsupported).
	IAM json.RawMessage `json:"iam"`
}

// Sandbox is E2B's Sandbox: the answer of create, connect, resume and
// each fork.
type Sandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// e2bLifecycle is SandboxDetail.lifecycle.
type e2bLifecycle struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// SandboxDetail is E2B's SandboxDetail (GET /sandboxes/{id}).
type SandboxDetail struct {
	TemplateID          string            `json:"templateID"`
	SandboxID           string            `json:"sandboxID"`
	Alias               string            `json:"alias,omitempty"`
	ClientID            string            `json:"clientID"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	EnvdVersion         string            `json:"envdVersion"`
	EnvdAccessToken     string            `json:"envdAccessToken"`
	Domain              *string           `json:"domain"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int               `json:"memoryMB"`
	DiskSizeMB          int               `json:"diskSizeMB"`
	Metadata            map[string]string `json:"metadata"`
	State               string            `json:"state"`
	AllowInternetAccess *bool             `json:"allowInternetAccess"`
	Network             *e2bNetworkInfo   `json:"network,omitempty"`
	Lifecycle           e2bLifecycle      `json:"lifecycle"`
	VolumeMounts        []any             `json:"volumeMounts"`
}

// e2bNetworkInfo is SandboxDetail.network: what SPACE keeps of it, whether
// the sandbox's ports are public (absent for a sandbox made through SPACE's
// own API, which has no E2B port rule).
type e2bNetworkInfo struct {
	AllowPublicTraffic bool `json:"allowPublicTraffic"`
	// AllowOut and DenyOut are its egress policy as E2B says it
	// (e2bNetworkOf).
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
	// MaskRequestHost is the Host its ports' requests carry (parseHostMask).
	MaskRequestHost string `json:"maskRequestHost,omitempty"`
	// Rules are its header rules, values left empty (rules.go).
	Rules map[string][]e2bRuleInfo `json:"rules,omitempty"`
}

// ListedSandbox is E2B's ListedSandbox (GET /v2/sandboxes).
type ListedSandbox struct {
	TemplateID   string            `json:"templateID"`
	Alias        string            `json:"alias,omitempty"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int               `json:"memoryMB"`
	DiskSizeMB   int               `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []any             `json:"volumeMounts"`
}

// e2bSnapshotInfo is E2B's SnapshotInfo.
type e2bSnapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// e2bForkResult is one element of the answer of POST /sandboxes/{id}/fork.
type e2bForkResult struct {
	Sandbox *Sandbox  `json:"sandbox,omitempty"`
	Error   *e2bError `json:"error,omitempty"`
}

// e2bNoEnd is the endAt of a sandbox without a timeout (SPACE allows
// none; E2B's field is required).
var e2bNoEnd = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// e2bState is the E2B state of a SPACE state: "running" or "paused"; ""
// for the states E2B lists nowhere (deleting, deleted, failed). A sandbox
// on its way to running is running; one saved or stopped is paused, as
// connect brings it back.
func e2bState(st sandbox.State) string {
	switch st {
	case sandbox.StateCreating, sandbox.StateRunning, sandbox.StateResuming, sandbox.StateRestoring, sandbox.StateRecovering:
		return "running"
	case sandbox.StatePausing, sandbox.StatePaused, sandbox.StateHibernating, sandbox.StateHibernated, sandbox.StateStopping, sandbox.StateStopped:
		return "paused"
	}
	return ""
}

// e2bClientID is the deprecated, required clientID: the node.
func e2bClientID(sb *sandbox.Sandbox) string {
	if sb.Node != "" {
		return sb.Node
	}
	return "space"
}

func e2bEndAt(sb *sandbox.Sandbox) time.Time {
	if sb.ExpiresAt.IsZero() {
		return e2bNoEnd
	}
	return sb.ExpiresAt
}

// e2bSandboxOf is sb as E2B's Sandbox, with traffic its trafficAccessToken
// (nil when its ports are public or it has no E2B port rule).
func (a *API) e2bSandboxOf(sb *sandbox.Sandbox, traffic *string) Sandbox {
	domain := a.domain
	return Sandbox{
		TemplateID: sb.Template, SandboxID: sb.ID, Alias: sb.Name, ClientID: e2bClientID(sb),
		EnvdVersion: EnvdVersion, EnvdAccessToken: a.AccessToken(sb.ID), TrafficAccessToken: traffic, Domain: &domain,
	}
}

// e2bDetailOf is sb as E2B's SandboxDetail.
func (a *API) e2bDetailOf(sb *sandbox.Sandbox) SandboxDetail {
	domain := a.domain
	allow := sb.EgressOr(a.svc.DefaultEgress()).Spec().AllowInternet
	md := e2bMetadataOf(sb)
	return SandboxDetail{
		TemplateID: sb.Template, SandboxID: sb.ID, Alias: sb.Name, ClientID: e2bClientID(sb),
		StartedAt: sb.CreatedAt, EndAt: e2bEndAtOf(sb), EnvdVersion: EnvdVersion,
		EnvdAccessToken: a.AccessToken(sb.ID), Domain: &domain,
		CPUCount: sb.CPUs, MemoryMB: sb.MemoryMiB, DiskSizeMB: sb.DiskMiB, Metadata: md,
		State: e2bState(sb.State), AllowInternetAccess: &allow,
		Lifecycle:    e2bLifecycleInfo(sb),
		VolumeMounts: []any{},
	}
}

// e2bListedOf is sb as E2B's ListedSandbox.
func e2bListedOf(sb *sandbox.Sandbox) ListedSandbox {
	md := e2bMetadataOf(sb)
	return ListedSandbox{
		TemplateID: sb.Template, Alias: sb.Name, SandboxID: sb.ID, ClientID: e2bClientID(sb),
		StartedAt: sb.CreatedAt, EndAt: e2bEndAtOf(sb), CPUCount: sb.CPUs, MemoryMB: sb.MemoryMiB,
		DiskSizeMB: sb.DiskMiB, Metadata: md, State: e2bState(sb.State), EnvdVersion: EnvdVersion,
		VolumeMounts: []any{},
	}
}

// RuntimeKey is the metadata key under which E2B's getInfo and list
// answers say which runtime a sandbox got ("vm": its own kernel; "ns":
// namespaces on the host kernel): E2B's API has no field for it. The
// "space." namespace is reserved, so no caller can set it.
const RuntimeKey = "space.runtime"

// RuntimeHeader says the runtime on E2B's create answer, whose body has
// neither a runtime field nor the metadata.
const RuntimeHeader = "Space-Runtime"

// e2bMetadataOf is sb's metadata as E2B answers show it: the caller's,
// and the runtime under RuntimeKey.
func e2bMetadataOf(sb *sandbox.Sandbox) map[string]string {
	md := maps.Clone(sb.Metadata)
	if md == nil {
		md = map[string]string{}
	}
	md[RuntimeKey] = sb.Runtime
	return md
}
