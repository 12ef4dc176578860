package e2bapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
	"github.com/spacesandbox/space/internal/store"
)

// The E2B sandbox calls, each mapped onto SPACE's lifecycle by calling the
// operations of internal/service, as the /v1 handlers do, and turning the
// domain values they return into E2B's JSON: E2B's pause is SPACE's pause
// (the execution frozen in memory), connect resumes it, timeout is the TTL.

// e2bDefaultTimeout is the timeout of a create or fork that names none
// (E2B's server default; the SDKs always send one).
const e2bDefaultTimeout = 15 * time.Second

// decodeE2B reads a bounded JSON body into v; unknown fields are ignored,
// as E2B's server ignores them, and an absent body leaves v as it is.
func decodeE2B(w http.ResponseWriter, r *http.Request, v any) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		if mb := (*http.MaxBytesError)(nil); errors.As(err, &mb) {
			return &tooLargeError{limit: maxJSONBody, err: mb}
		}
		return fmt.Errorf("%w: read body: %v", errdefs.ErrInvalidArgument, err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: malformed JSON body: %v", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

// e2bSeconds checks an E2B timeout in seconds and returns it as a
// duration.
func e2bSeconds(secs int64) (time.Duration, error) {
	if secs <= 0 || secs > int64(sandbox.MaxTimeout/time.Second) {
		return 0, fmt.Errorf("%w: timeout %d s: want 1 to %d seconds", errdefs.ErrInvalidArgument, secs, int64(sandbox.MaxTimeout/time.Second))
	}
	return time.Duration(secs) * time.Second, nil
}

// e2bUnsupported names the first field of req that SPACE cannot honour
// yet: refusing it beats a sandbox that silently lacks what was asked.
func e2bUnsupported(req *e2bNewSandbox) error {
	switch {
	case len(req.VolumeMounts) > 0:
		return fmt.Errorf("%w: volumeMounts are not supported by SPACE yet", errdefs.ErrInvalidArgument)
	case len(req.MCP) > 0:
		return fmt.Errorf("%w: mcp is not supported by SPACE yet", errdefs.ErrInvalidArgument)
	case iamAsks(req.IAM):
		return fmt.Errorf("%w: iam (workload identity tokens) is not supported by SPACE: it mints no workload tokens; store the secret as a SPACE credential (docs/credentials.md), which the gateway injects without the sandbox holding it", errdefs.ErrInvalidArgument)
	}
	return nil
}

// iamAsks reports whether an E2B iam field asks for anything: absent,
// null, {} and an object whose tokens are empty do not.
func iamAsks(raw json.RawMessage) bool {
	if len(bytes.TrimSpace(raw)) == 0 || isJSONEmpty(raw) {
		return false
	}
	var v map[string]json.RawMessage
	if err := json.Unmarshal(raw, &v); err != nil {
		return true
	}
	for k, t := range v {
		if !strings.EqualFold(k, "tokens") || !isJSONEmpty(t) {
			return true
		}
	}
	return false
}

// handleE2BCreate is POST /sandboxes and /v2/sandboxes: a sandbox from a
// template, or from a snapshot when templateID is a SPACE snapshot id
// (E2B's "create from a snapshot").
func (a *API) handleE2BCreate(w http.ResponseWriter, r *http.Request) {
	var req e2bNewSandbox
	if err := decodeE2B(w, r, &req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if err := e2bUnsupported(&req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	ports, err := parseE2BNetwork(req.Network, req.Secure)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	policy, err := e2bCreateEgress(req.Network, req.AllowInternetAccess)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	rules, err := parseE2BRules(e2bRulesField(req.Network))
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	timeout := int64(e2bDefaultTimeout / time.Second)
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	ttl, err := e2bSeconds(timeout)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	idle, err := e2bLifecycleOf(&req, ttl)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if req.TemplateID == "" {
		a.writeE2BErr(w, r, fmt.Errorf("%w: templateID is required", errdefs.ErrInvalidArgument))
		return
	}
	c := a.host.Caller(r.Context())
	if snapID, ok, err := a.e2bSnapshotFor(r.Context(), c, req.TemplateID); err != nil {
		a.writeE2BErr(w, r, err)
		return
	} else if ok {
		if policy != nil {
			a.writeE2BErr(w, r, errE2BSnapshotEgress)
			return
		}
		a.e2bCreateFromSnapshot(w, r, c, snapID, ttl, idle, ports, rules)
		return
	}
	template, cpus, mem, err := a.e2bTemplateOf(r.Context(), c.Tenant, req.TemplateID)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	create := sandboxv1.CreateSandboxRequest{
		Template: template, CPUs: cpus, MemoryMiB: mem, Env: req.EnvVars, Metadata: req.Metadata, Timeout: ttl.String(),
		AllowInternetAccess: req.AllowInternetAccess,
	}
	if idle.timeout > 0 { // paused, not deleted, at its timeout
		create.Timeout, create.IdleTimeout, create.IdleAction = "", idle.timeout.String(), idle.action
	}
	params := service.CreateParams{CreateSandboxRequest: create}
	if policy != nil { // allowOut/denyOut: the policy says allow_internet_access too
		params.Egress, params.AllowInternetAccess = e2bEgressJSON(policy), nil
	}
	start := time.Now()
	sb, err := a.svc.Create(r.Context(), c, params)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if sb.State == sandbox.StateFailed {
		a.writeE2BErr(w, r, fmt.Errorf("%w: sandbox %s failed to start: %s; delete it and create another", errdefs.ErrFailedPrecondition, sb.ID, sb.Reason))
		return
	}
	if err := a.e2bOpenPorts(r.Context(), c, sb.ID, ports); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if err := a.e2bSetRules(r.Context(), c, sb, rules, true); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	a.host.ObserveCreate(time.Since(start))
	w.Header().Set(RuntimeHeader, sb.Runtime)
	writeJSON(w, http.StatusCreated, a.e2bSandboxOf(sb, a.e2bTrafficOf(sb.ID, ports.Public)))
}

// e2bCreateFromSnapshot starts a sandbox from snapshot id: SPACE's fork of
// the snapshot's sandbox from that snapshot, its ports public or not as
// this create asks (not as the snapshot's sandbox had them), and so is
// their host mask.
func (a *API) e2bCreateFromSnapshot(w http.ResponseWriter, r *http.Request, c service.Caller, id string, ttl time.Duration, idle e2bIdle, ports service.HTTPPorts, rules []service.HeaderRule) {
	snap, err := a.svc.GetSnapshot(r.Context(), c, id)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	child, err := a.e2bForkIdle(r.Context(), c, snap.SandboxID, snap.ID, ttl, idle)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if err := a.e2bOpenPorts(r.Context(), c, child.ID, ports); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if err := a.e2bSetRules(r.Context(), c, child, rules, true); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, a.e2bSandboxOf(child, a.e2bTrafficOf(child.ID, ports.Public)))
}

// e2bForkOne runs SPACE's fork of sandbox parent from snapshot snapID and
// gives the child timeout ttl. A child still starting is a success, as
// SPACE's fork answers it 202: the SDK's next call finds it running.
func (a *API) e2bForkOne(ctx context.Context, c service.Caller, parent, snapID string, ttl time.Duration) (*sandbox.Sandbox, error) {
	return a.e2bForkIdle(ctx, c, parent, snapID, ttl, e2bIdle{})
}

// e2bForkIdle is e2bForkOne for a child with idle handling idle, which
// then pauses at its timeout rather than being deleted.
func (a *API) e2bForkIdle(ctx context.Context, c service.Caller, parent, snapID string, ttl time.Duration, idle e2bIdle) (*sandbox.Sandbox, error) {
	child, err := a.svc.Fork(ctx, c, parent, service.ForkParams{Snapshot: snapID, IdleTimeout: idle.timeout, IdleAction: idle.action})
	if err != nil && !errors.Is(err, service.ErrStillWorking) {
		return nil, err
	}
	if idle.timeout > 0 {
		return child, nil
	}
	return a.svc.SetTimeout(ctx, c, child.ID, ttl)
}

func (a *API) handleE2BGet(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if e2bState(sb.State) == "" {
		a.writeE2BErr(w, r, fmt.Errorf("%w: sandbox %s is %s", errdefs.ErrNotFound, sb.ID, sb.State))
		return
	}
	out := a.e2bDetailOf(sb)
	if ports, ok, err := a.e2bPortRule(r.Context(), sb.ID); err != nil {
		a.writeE2BErr(w, r, err)
		return
	} else if ok {
		out.Network = &e2bNetworkInfo{AllowPublicTraffic: ports.Public, MaskRequestHost: ports.HostMask}
		out.Network.AllowOut, out.Network.DenyOut = e2bNetworkOf(sb.EgressOr(a.svc.DefaultEgress()))
		if out.Network.Rules, err = a.e2bRulesInfo(r.Context(), sb); err != nil {
			a.writeE2BErr(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleE2BKill is DELETE /sandboxes/{id}: 204 (also while the
// reconciler finishes the deletion), or 404.
func (a *API) handleE2BKill(w http.ResponseWriter, r *http.Request) {
	err := a.svc.Delete(r.Context(), a.host.Caller(r.Context()), r.PathValue("id"))
	if err != nil && !errors.Is(err, service.ErrStillWorking) {
		a.writeE2BErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleE2BTimeout is POST /sandboxes/{id}/timeout {timeout}: the sandbox
// now ends timeout seconds from now, sooner or later than before.
func (a *API) handleE2BTimeout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeE2B(w, r, &req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if req.Timeout == nil {
		a.writeE2BErr(w, r, fmt.Errorf("%w: timeout is required", errdefs.ErrInvalidArgument))
		return
	}
	a.e2bTimeout(w, r, *req.Timeout)
}

// handleE2BRefresh is POST /sandboxes/{id}/refreshes {duration}: the
// deprecated keep-alive, a timeout of duration seconds from now.
func (a *API) handleE2BRefresh(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Duration *int64 `json:"duration"`
	}
	if err := decodeE2B(w, r, &req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	secs := int64(e2bDefaultTimeout / time.Second)
	if req.Duration != nil {
		secs = *req.Duration
	}
	a.e2bTimeout(w, r, secs)
}

func (a *API) e2bTimeout(w http.ResponseWriter, r *http.Request, secs int64) {
	ttl, err := e2bSeconds(secs)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if err := a.e2bSetTimeout(r.Context(), a.host.Caller(r.Context()), r.PathValue("id"), ttl); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleE2BPause is POST /sandboxes/{id}/pause: SPACE's pause (the
// execution's memory kept). 204 once paused; 409 when already paused.
// {"memory": false} (E2B's filesystem-only pause) is SPACE's stop
// (lifecycle.go).
func (a *API) handleE2BPause(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Memory              *bool `json:"memory"`
		RequireHealthyGuest *bool `json:"requireHealthyGuest"`
	}
	if err := decodeE2B(w, r, &req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if req.RequireHealthyGuest != nil && *req.RequireHealthyGuest && e2bState(sb.State) == "running" {
		if err := a.e2bGuestAnswers(r.Context(), sb); err != nil {
			a.writeE2BErr(w, r, err)
			return
		}
	}
	if req.Memory != nil && !*req.Memory {
		a.e2bPauseWithoutMemory(w, r, sb)
		return
	}
	if e2bState(sb.State) == "paused" {
		a.writeE2BErr(w, r, fmt.Errorf("%w: sandbox %s is already %s", errdefs.ErrConflict, sb.ID, sb.State))
		return
	}
	// Still pausing after the wait is a success, as SPACE's pause answers
	// it 202.
	_, err = a.svc.Lifecycle(r.Context(), a.host.Caller(r.Context()), sb.ID, sandbox.OpPause)
	if err != nil && !errors.Is(err, service.ErrStillWorking) {
		a.writeE2BErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// e2bConnectRequest is the body of connect and resume (autoPause: resume
// only, e2bResumeAutoPause).
type e2bConnectRequest struct {
	Timeout   *int64 `json:"timeout"`
	Memory    *bool  `json:"memory"`
	AutoPause *bool  `json:"autoPause"`
}

// handleE2BConnect is POST /sandboxes/{id}/connect (and /v2/…): 200 with
// the sandbox when it runs, 201 after resuming it. The timeout is only
// ever extended, never shortened.
func (a *API) handleE2BConnect(w http.ResponseWriter, r *http.Request) {
	a.e2bConnect(w, r, false)
}

// handleE2BResume is the deprecated POST /sandboxes/{id}/resume: connect
// that refuses a running sandbox with 409.
func (a *API) handleE2BResume(w http.ResponseWriter, r *http.Request) {
	a.e2bConnect(w, r, true)
}

func (a *API) e2bConnect(w http.ResponseWriter, r *http.Request, resumeOnly bool) {
	var req e2bConnectRequest
	if err := decodeE2B(w, r, &req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if resumeOnly {
		if err := e2bResumeAutoPause(sb, req.AutoPause); err != nil {
			a.writeE2BErr(w, r, err)
			return
		}
	}
	status := http.StatusOK
	switch e2bState(sb.State) {
	case "running":
		if resumeOnly {
			a.writeE2BErr(w, r, fmt.Errorf("%w: sandbox %s is already running", errdefs.ErrConflict, sb.ID))
			return
		}
	case "paused":
		reboot := req.Memory != nil && !*req.Memory
		if err := a.e2bWake(r.Context(), a.host.Caller(r.Context()), sb, reboot); err != nil {
			a.writeE2BErr(w, r, err)
			return
		}
		status = http.StatusCreated
	default:
		a.writeE2BErr(w, r, fmt.Errorf("%w: sandbox %s is %s", errdefs.ErrNotFound, sb.ID, sb.State))
		return
	}
	if sb, err = a.sandboxFor(r); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	traffic, err := a.e2bTrafficFor(r.Context(), sb.ID)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if req.Timeout != nil && *req.Timeout > 0 && e2bPausesOnTimeout(sb) {
		if err := a.e2bConnectIdle(r.Context(), sb, *req.Timeout); err != nil {
			a.writeE2BErr(w, r, err)
			return
		}
	} else if req.Timeout != nil && *req.Timeout > 0 {
		end := time.Now().Add(time.Duration(*req.Timeout) * time.Second)
		if !sb.ExpiresAt.IsZero() && end.After(sb.ExpiresAt) {
			ttl, err := e2bSeconds(*req.Timeout)
			if err != nil {
				a.writeE2BErr(w, r, err)
				return
			}
			if _, err := a.svc.SetTimeout(r.Context(), a.host.Caller(r.Context()), sb.ID, ttl); err != nil {
				a.writeE2BErr(w, r, err)
				return
			}
		}
	}
	writeJSON(w, status, a.e2bSandboxOf(sb, traffic))
}

// Metric is one sample of E2B's SandboxMetric: only what SPACE measures
// (what is not measured is left out rather than reported as zero).
type Metric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       uint64    `json:"memUsed"`
	MemTotal      uint64    `json:"memTotal"`
	// MemCache is the page cache: a VM guest's own (its /proc/meminfo),
	// an ns sandbox's as its cgroup is charged (an ns sandbox's
	// /proc/meminfo is the host's). E2B's Python SDK requires the field.
	MemCache *uint64 `json:"memCache,omitempty"`
	// DiskUsed and DiskTotal are what an ns sandbox's root volume is
	// charged on the node and its limit (disk_mib), or what a vm sandbox's
	// disk image holds allocated and its size; omitted where the node does
	// not account the disk (an ns store without quotas).
	DiskUsed  *uint64 `json:"diskUsed,omitempty"`
	DiskTotal *uint64 `json:"diskTotal,omitempty"`
	// span is the time the sample's CPU use covers, level how many times
	// it was merged (history.go).
	span  time.Duration
	level int
}

// e2bMetricWindow is how long the CPU use of a metrics sample is measured
// over.
const e2bMetricWindow = 250 * time.Millisecond

// handleE2BMetrics is GET /sandboxes/{id}/metrics: the samples of the
// sandbox's history (history.go) from second start to second end (unix
// seconds, both optional and included), then, when the window reaches the
// current second and the sandbox runs, one sample taken now on its node
// (CPU use over a quarter of a second, memory as the node measures it, a
// VM's as its guest does).
func (a *API) handleE2BMetrics(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	start, end, err := service.MetricsWindow(r.URL.Query().Get("start"), r.URL.Query().Get("end"))
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	out, err := a.Metrics(r.Context(), sb, start, end)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// Metrics returns sandbox sb's samples from second start to second end
// (unix seconds, both included): its history (history.go), then, when the
// window reaches the current second and sb runs, one sample taken now. The
// native REST API's GET /v1/sandboxes/{id}/metrics answers the same
// samples (internal/server gives them to it).
func (a *API) Metrics(ctx context.Context, sb *sandbox.Sandbox, start, end int64) ([]Metric, error) {
	out, err := a.history.read(ctx, sb.ID, start, end)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: metrics history: %w", sb.ID, err)
	}
	if out == nil {
		out = []Metric{}
	}
	if now := time.Now().Unix(); start <= now && end >= now {
		m, err := a.sampleE2BMetric(ctx, sb)
		if err != nil {
			return nil, err
		}
		if m != nil {
			out = append(out, *m)
		}
	}
	return out, nil
}

// Span is the time sample m's CPU use covers: MetricsEvery for a sample of
// the history that was never merged, the sum of the merged ones' for a
// merged one, the quarter second measured for one taken at a request.
func (m Metric) Span() time.Duration { return m.span }

// sampleE2BMetric measures sandbox sb now: nil when it is not running (or
// its execution ended meanwhile).
func (a *API) sampleE2BMetric(ctx context.Context, sb *sandbox.Sandbox) (*Metric, error) {
	if sb.State != sandbox.StateRunning || sb.Node == "" || sb.ExecID == "" {
		return nil, nil
	}
	node, err := a.host.Node(ctx, sb.Node)
	if err != nil {
		return nil, err
	}
	first, err := node.Stats(ctx, sb.ExecID)
	var m *Metric
	if err == nil {
		select {
		case <-time.After(e2bMetricWindow):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var second *nodev1.ExecStats
		if second, err = node.Stats(ctx, sb.ExecID); err == nil {
			sample := e2bMetricOf(first, second)
			sample.span = second.Time.Sub(first.Time)
			m = &sample
			if sb.Runtime == "vm" {
				// The node sees the VMM's memory (guest RAM as QEMU holds
				// it, and QEMU's own); the guest's view is what its user
				// means.
				err = a.guestMemory(ctx, sb, m)
			}
		}
	}
	if errdefs.IsNotFound(err) {
		return nil, nil // the execution ended meanwhile
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: metrics: %w", sb.ID, err)
	}
	return m, nil
}

// maxMeminfo bounds what is read of a guest's /proc/meminfo.
const maxMeminfo = 64 << 10

// guestMemory fills m's memory from the guest's own /proc/meminfo.
func (a *API) guestMemory(ctx context.Context, sb *sandbox.Sandbox, m *Metric) error {
	b, err := a.host.ReadGuestFile(ctx, sb, "/proc/meminfo", "root", maxMeminfo)
	if err != nil {
		return err
	}
	mi, err := parseMeminfo(b)
	if err != nil {
		return fmt.Errorf("guest /proc/meminfo: %w", err)
	}
	m.MemTotal, m.MemUsed = mi.total, mi.total-min(mi.available, mi.total)
	m.MemCache = &mi.cached
	return nil
}

// meminfo is what a metrics sample needs of /proc/meminfo, in bytes.
type meminfo struct{ total, available, cached uint64 }

// parseMeminfo reads MemTotal, MemAvailable and Cached ("Name:  123 kB"
// lines) from a guest's /proc/meminfo — guest bytes, so hostile: every
// line is checked and values are bounded.
func parseMeminfo(b []byte) (meminfo, error) {
	var mi meminfo
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var dst *uint64
		switch name {
		case "MemTotal":
			dst = &mi.total
		case "MemAvailable":
			dst = &mi.available
		case "Cached":
			dst = &mi.cached
		default:
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return meminfo{}, fmt.Errorf("%s: malformed value %q", name, service.Clip(rest))
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || kb > 1<<40 { // 1 PiB in kB: anything above is not a VM's
			return meminfo{}, fmt.Errorf("%s: value %q out of range", name, service.Clip(f[0]))
		}
		*dst = kb * 1024
		seen++
	}
	if mi.total == 0 || seen < 3 {
		return meminfo{}, errors.New("MemTotal, MemAvailable and Cached are not all there")
	}
	return mi, nil
}

// e2bMetricOf makes a sample from two measures of one execution: CPU use
// is the CPU time between them over the wall time, per allowed CPU.
func e2bMetricOf(a, b *nodev1.ExecStats) Metric {
	cache := b.MemoryCacheBytes // a vm's is replaced by its guest's (guestMemory)
	m := Metric{
		Timestamp: b.Time, TimestampUnix: b.Time.Unix(), CPUCount: max(b.CPUs, 1),
		MemUsed: b.MemoryBytes, MemTotal: b.MemoryLimitBytes, MemCache: &cache,
	}
	if b.DiskLimitBytes > 0 {
		used, total := b.DiskBytes, b.DiskLimitBytes
		m.DiskUsed, m.DiskTotal = &used, &total
	}
	if wall := b.Time.Sub(a.Time); wall > 0 && b.CPUNanos >= a.CPUNanos {
		pct := float64(b.CPUNanos-a.CPUNanos) / float64(wall.Nanoseconds()) / float64(m.CPUCount) * 100
		m.CPUUsedPct = math.Round(min(pct, 100)*100) / 100
	}
	return m
}

// e2bSnapshotKind is the snapshot kind E2B's snapshots and forks map to:
// full (memory and disk) where the runtime can save memory, else disk.
func e2bSnapshotKind(sb *sandbox.Sandbox) store.SnapshotKind {
	if sb.Runtime == "vm" {
		return store.SnapshotFull
	}
	return store.SnapshotDisk
}

// handleE2BCreateSnapshot is POST /sandboxes/{id}/snapshots: SPACE's
// snapshot of the sandbox, usable as templateID in a create. 201 once it
// is ready.
func (a *API) handleE2BCreateSnapshot(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name   string `json:"name"`
		Memory *bool  `json:"memory"`
	}
	if err := decodeE2B(w, r, &req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	if req.Name != "" {
		if err := a.svc.CheckSnapshotName(r.Context(), req.Name); err != nil {
			a.writeE2BErr(w, r, err)
			return
		}
	}
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	kind, err := e2bSnapshotKindFor(sb, req.Memory)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	c := a.host.Caller(r.Context())
	snap, err := a.svc.TakeSnapshot(r.Context(), c, sb.ID, kind, service.TierManual)
	names, err := a.e2bNameSnapshot(r.Context(), c, snap, req.Name, err)
	if errors.Is(err, service.ErrStillWorking) {
		err = fmt.Errorf("%w: snapshot %s is still being taken; it is listed once ready", errdefs.ErrUnavailable, snap.ID)
	}
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, e2bSnapshotInfo{SnapshotID: snap.ID, Names: names})
}

// handleE2BListSnapshots is GET /snapshots?sandboxID=&limit=&nextToken=:
// the caller's ready snapshots taken on request (not the scheduled ones).
func (a *API) handleE2BListSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, err := parseE2BPage(q, a.pageCursorFor(r, pageSnapshots))
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	c := a.host.Caller(r.Context())
	snaps, err := a.svc.TenantSnapshots(r.Context(), c, store.SnapshotFilter{
		SandboxID: q.Get("sandboxID"), State: store.SnapshotReady,
	})
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	names, err := a.svc.SnapshotNames(r.Context(), c)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	var items []pageItem
	for _, snap := range snaps {
		if snap.Tier == service.TierManual && e2bNamed(names[snap.ID], q.Get("name")) {
			items = append(items, pageItem{id: snap.ID, at: snap.CreatedAt})
		}
	}
	out := []e2bSnapshotInfo{}
	kept, next := page.apply(items)
	for _, it := range kept {
		out = append(out, e2bSnapshotInfo{SnapshotID: it.id, Names: e2bNames(names[it.id])})
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleE2BDeleteSnapshot is DELETE /templates/{id}, how the SDK deletes a
// snapshot: SPACE's snapshot deletion. Templates proper are managed with
// `space template`.
func (a *API) handleE2BDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	notFound := fmt.Errorf("%w: snapshot %q (templates are deleted with `space template delete`)", errdefs.ErrNotFound, service.Clip(id))
	if !sandbox.ValidSnapshotID(id) {
		a.writeE2BErr(w, r, notFound)
		return
	}
	c := a.host.Caller(r.Context())
	snap, err := a.svc.GetSnapshot(r.Context(), c, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		err = notFound
	}
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	// Still being deleted after the wait is a success, as SPACE's
	// deletion answers it 202.
	err = a.svc.DeleteSnapshot(r.Context(), c, snap.SandboxID, snap.ID)
	if err != nil && !errors.Is(err, service.ErrStillWorking) {
		a.writeE2BErr(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// maxE2BForks bounds one fork request (E2B's limit).
const maxE2BForks = 100

// handleE2BFork is POST /sandboxes/{id}/fork {timeout, count}: one
// snapshot of the sandbox (full on vm, disk on ns), then count sandboxes
// started from it; each result is a sandbox or an error (partial success).
// The source keeps running, its id and its timeout. Each child's ports are
// reachable as its parent's are (its own traffic token when private); ports
// exposed with `space port expose` are not carried over, as with SPACE's
// fork.
func (a *API) handleE2BFork(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int64 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if err := decodeE2B(w, r, &req); err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
	}
	if count < 1 || count > maxE2BForks {
		a.writeE2BErr(w, r, fmt.Errorf("%w: count %d: want 1 to %d", errdefs.ErrInvalidArgument, count, maxE2BForks))
		return
	}
	timeout := int64(e2bDefaultTimeout / time.Second)
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	ttl, err := e2bSeconds(timeout)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	parent, err := a.sandboxFor(r)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	ports, hasRule, err := a.e2bPortRule(r.Context(), parent.ID)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	c := a.host.Caller(r.Context())
	snap, err := a.svc.TakeSnapshot(r.Context(), c, parent.ID, e2bSnapshotKind(parent), service.TierFork)
	if errors.Is(err, service.ErrStillWorking) {
		err = fmt.Errorf("%w: the fork's snapshot %s is still being taken; retry", errdefs.ErrUnavailable, snap.ID)
	}
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	results := make([]e2bForkResult, 0, count)
	for range count {
		child, err := a.e2bForkOne(r.Context(), c, parent.ID, snap.ID, ttl)
		if err == nil && hasRule {
			err = a.e2bOpenPorts(r.Context(), c, child.ID, ports)
		}
		if err == nil && a.creds != nil {
			err = a.e2bCopyRules(r.Context(), c, parent, child)
		}
		if err != nil {
			e := a.e2bErrorOf(r, err)
			results = append(results, e2bForkResult{Error: &e})
			continue
		}
		var traffic *string
		if hasRule {
			traffic = a.e2bTrafficOf(child.ID, ports.Public)
		}
		sb := a.e2bSandboxOf(child, traffic)
		results = append(results, e2bForkResult{Sandbox: &sb})
	}
	writeJSON(w, http.StatusCreated, results)
}
