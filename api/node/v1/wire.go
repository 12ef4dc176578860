package nodev1

import (
	"encoding/json"
	"time"

	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The Go types of this package are what the control plane and the node
// hold (and some keep on disk as JSON: runtime records, artifacts in the
// store); the messages of nodeapi are what travels. The functions below
// convert one to the other, in one place both ends share, so the two
// cannot drift apart: a field added to one and not the other fails
// TestWireRoundTrip.

// timestamp is t on the wire; the zero time travels as absent.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// fromTimestamp is the time of ts; absent is the zero time.
func fromTimestamp(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// raw is b as a JSON value; empty is absent.
func raw(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

// ToWire is ex on the wire.
func (ex Execution) ToWire() *nodeapiv1.Execution {
	return &nodeapiv1.Execution{
		ExecId: ex.ExecID, SandboxId: ex.SandboxID, Generation: ex.Generation, ActivationId: ex.ActivationID,
		Runtime: ex.Runtime, Template: ex.Template, State: string(ex.State), Reason: ex.Reason,
		StartedAt: timestamp(ex.StartedAt), LastActivity: timestamp(ex.LastActivity), Warm: ex.Warm, Fenced: ex.Fenced,
		StartNotReady: ex.StartNotReady,
	}
}

// ExecutionFromWire is the execution of w.
func ExecutionFromWire(w *nodeapiv1.Execution) Execution {
	return Execution{
		ExecID: w.GetExecId(), SandboxID: w.GetSandboxId(), Generation: w.GetGeneration(), ActivationID: w.GetActivationId(),
		Runtime: w.GetRuntime(), Template: w.GetTemplate(), State: ExecState(w.GetState()), Reason: w.GetReason(),
		StartedAt: fromTimestamp(w.GetStartedAt()), LastActivity: fromTimestamp(w.GetLastActivity()), Warm: w.GetWarm(), Fenced: w.GetFenced(),
		StartNotReady: w.GetStartNotReady(),
	}
}

// ExecutionsToWire is execs on the wire.
func ExecutionsToWire(execs []Execution) []*nodeapiv1.Execution {
	out := make([]*nodeapiv1.Execution, 0, len(execs))
	for _, ex := range execs {
		out = append(out, ex.ToWire())
	}
	return out
}

// ExecutionsFromWire is the executions of w; none is nil.
func ExecutionsFromWire(w []*nodeapiv1.Execution) []Execution {
	var out []Execution
	for _, ex := range w {
		out = append(out, ExecutionFromWire(ex))
	}
	return out
}

// ToWire is req on the wire.
func (req StartExecution) ToWire() *nodeapiv1.StartExecutionRequest {
	w := &nodeapiv1.StartExecutionRequest{
		ExecId: req.ExecID, SandboxId: req.SandboxID, Generation: req.Generation, ActivationId: req.ActivationID,
		Template: req.Template, Runtime: req.Runtime, Cpus: int64(req.CPUs), MemoryMib: int64(req.MemoryMiB),
		DiskMib: int64(req.DiskMiB), Env: req.Env, Snapshot: req.Snapshot, TenantId: req.TenantID, Egress: req.Egress,
		NoActivity: req.NoActivity,
	}
	if req.CA != nil {
		w.Ca = &nodeapiv1.SandboxCA{CertPem: req.CA.CertPEM, KeyPem: req.CA.KeyPEM}
	}
	return w
}

// StartExecutionFromWire is the request of w.
func StartExecutionFromWire(w *nodeapiv1.StartExecutionRequest) StartExecution {
	req := StartExecution{
		ExecID: w.GetExecId(), SandboxID: w.GetSandboxId(), Generation: w.GetGeneration(), ActivationID: w.GetActivationId(),
		Template: w.GetTemplate(), Runtime: w.GetRuntime(), CPUs: int(w.GetCpus()), MemoryMiB: int(w.GetMemoryMib()),
		DiskMiB: int(w.GetDiskMib()), Env: w.GetEnv(), Snapshot: w.GetSnapshot(), TenantID: w.GetTenantId(), Egress: raw(w.GetEgress()),
		NoActivity: w.GetNoActivity(),
	}
	if ca := w.GetCa(); ca != nil {
		req.CA = &SandboxCA{CertPEM: ca.GetCertPem(), KeyPEM: ca.GetKeyPem()}
	}
	return req
}

// ToWire is st on the wire.
func (st ExecStats) ToWire() *nodeapiv1.ExecutionStatsResponse {
	return &nodeapiv1.ExecutionStatsResponse{
		Time: timestamp(st.Time), CpuNanos: st.CPUNanos, Cpus: int64(st.CPUs), MemoryBytes: st.MemoryBytes,
		MemoryLimitBytes: st.MemoryLimitBytes, Pids: st.Pids, DiskBytes: st.DiskBytes, DiskLimitBytes: st.DiskLimitBytes,
		MemoryCacheBytes: st.MemoryCacheBytes,
	}
}

// ExecStatsFromWire is the reading of w.
func ExecStatsFromWire(w *nodeapiv1.ExecutionStatsResponse) ExecStats {
	return ExecStats{
		Time: fromTimestamp(w.GetTime()), CPUNanos: w.GetCpuNanos(), CPUs: int(w.GetCpus()), MemoryBytes: w.GetMemoryBytes(),
		MemoryLimitBytes: w.GetMemoryLimitBytes(), Pids: w.GetPids(), DiskBytes: w.GetDiskBytes(), DiskLimitBytes: w.GetDiskLimitBytes(),
		MemoryCacheBytes: w.GetMemoryCacheBytes(),
	}
}

// ToWire is s on the wire.
func (s Snapshot) ToWire() *nodeapiv1.Snapshot {
	return &nodeapiv1.Snapshot{
		Id: s.ID, Kind: s.Kind, Runtime: s.Runtime, SandboxId: s.SandboxID, Template: s.Template,
		CreatedAt: timestamp(s.CreatedAt), SizeBytes: s.SizeBytes, MemoryMib: int64(s.MemoryMiB), Cpus: int64(s.CPUs),
	}
}

// SnapshotFromWire is the snapshot of w.
func SnapshotFromWire(w *nodeapiv1.Snapshot) Snapshot {
	return Snapshot{
		ID: w.GetId(), Kind: w.GetKind(), Runtime: w.GetRuntime(), SandboxID: w.GetSandboxId(), Template: w.GetTemplate(),
		CreatedAt: fromTimestamp(w.GetCreatedAt()), SizeBytes: w.GetSizeBytes(), MemoryMiB: int(w.GetMemoryMib()), CPUs: int(w.GetCpus()),
	}
}

// ToWire is a on the wire.
func (a Artifacts) ToWire() *nodeapiv1.Artifacts {
	w := &nodeapiv1.Artifacts{Export: a.Export, PlainBytes: a.PlainBytes, StoredBytes: a.StoredBytes}
	for _, o := range a.Objects {
		w.Objects = append(w.Objects, &nodeapiv1.StoredObject{Name: o.Name, Key: o.Key, Size: o.Size, Digest: o.Digest, Aad: o.AAD})
	}
	return w
}

// ArtifactsFromWire is the artifacts of w.
func ArtifactsFromWire(w *nodeapiv1.Artifacts) Artifacts {
	a := Artifacts{Export: raw(w.GetExport()), PlainBytes: w.GetPlainBytes(), StoredBytes: w.GetStoredBytes()}
	for _, o := range w.GetObjects() {
		a.Objects = append(a.Objects, Object{Name: o.GetName(), Key: o.GetKey(), Size: o.GetSize(), Digest: o.GetDigest(), AAD: o.GetAad()})
	}
	return a
}

// ToWire is p on the wire.
func (p Progress) ToWire() *nodeapiv1.Progress {
	return &nodeapiv1.Progress{Phase: p.Phase, Message: p.Message, Done: p.Done, Total: p.Total, Unit: p.Unit, Rate: p.Rate, Final: p.Final}
}

// ProgressFromWire is the reading of w.
func ProgressFromWire(w *nodeapiv1.Progress) Progress {
	return Progress{Phase: w.GetPhase(), Message: w.GetMessage(), Done: w.GetDone(), Total: w.GetTotal(), Unit: w.GetUnit(), Rate: w.GetRate(), Final: w.GetFinal()}
}

// ToWire is t on the wire.
func (t TemplateReady) ToWire() *nodeapiv1.TemplateReady {
	w := &nodeapiv1.TemplateReady{Name: t.Name, SizeBytes: t.SizeBytes}
	if t.Progress != nil {
		w.Progress = t.Progress.ToWire()
	}
	return w
}

// TemplateReadyFromWire is the template of w.
func TemplateReadyFromWire(w *nodeapiv1.TemplateReady) TemplateReady {
	t := TemplateReady{Name: w.GetName(), SizeBytes: w.GetSizeBytes()}
	if p := w.GetProgress(); p != nil {
		r := ProgressFromWire(p)
		t.Progress = &r
	}
	return t
}

// ToWire is o on the wire.
func (o Orphans) ToWire() *nodeapiv1.CollectOrphansResponse {
	w := &nodeapiv1.CollectOrphansResponse{Pending: o.Pending}
	for _, x := range o.Orphans {
		w.Orphans = append(w.Orphans, &nodeapiv1.Orphan{ExecId: x.ExecID, Runtime: x.Runtime, Cleaned: x.Cleaned, Error: x.Error, VolumeOnly: x.VolumeOnly})
	}
	return w
}

// OrphansFromWire is the orphans of w.
func OrphansFromWire(w *nodeapiv1.CollectOrphansResponse) Orphans {
	o := Orphans{Orphans: []Orphan{}, Pending: w.GetPending()}
	for _, x := range w.GetOrphans() {
		o.Orphans = append(o.Orphans, Orphan{ExecID: x.GetExecId(), Runtime: x.GetRuntime(), Cleaned: x.GetCleaned(), Error: x.GetError(), VolumeOnly: x.GetVolumeOnly()})
	}
	return o
}

// ToWire is i on the wire.
func (i Info) ToWire() *nodeapiv1.InfoResponse {
	return &nodeapiv1.InfoResponse{NodeId: i.NodeID, Runtimes: i.Runtimes, Storage: i.Storage, Cpus: int64(i.CPUs), MemoryMib: int64(i.MemoryMiB)}
}

// InfoFromWire is the description of w.
func InfoFromWire(w *nodeapiv1.InfoResponse) Info {
	return Info{NodeID: w.GetNodeId(), Runtimes: w.GetRuntimes(), Storage: w.GetStorage(), CPUs: int(w.GetCpus()), MemoryMiB: int(w.GetMemoryMib())}
}

func (k PoolKey) toWire() *nodeapiv1.PoolKey {
	return &nodeapiv1.PoolKey{Template: k.Template, Runtime: k.Runtime, Cpus: int64(k.CPUs), MemoryMib: int64(k.MemoryMiB)}
}

func poolKeyFromWire(w *nodeapiv1.PoolKey) PoolKey {
	return PoolKey{Template: w.GetTemplate(), Runtime: w.GetRuntime(), CPUs: int(w.GetCpus()), MemoryMiB: int(w.GetMemoryMib())}
}

// PoolStatusesToWire is pools on the wire.
func PoolStatusesToWire(pools []PoolStatus) []*nodeapiv1.PoolStatus {
	var out []*nodeapiv1.PoolStatus
	for _, p := range pools {
		out = append(out, &nodeapiv1.PoolStatus{
			Key: p.PoolKey.toWire(), Ready: int64(p.Ready), Filling: int64(p.Filling), Hits: p.Hits, Misses: p.Misses, MemoryBytes: p.MemoryBytes,
		})
	}
	return out
}

// PoolStatusesFromWire is the pools of w; none is nil.
func PoolStatusesFromWire(w []*nodeapiv1.PoolStatus) []PoolStatus {
	var out []PoolStatus
	for _, p := range w {
		out = append(out, PoolStatus{
			PoolKey: poolKeyFromWire(p.GetKey()), Ready: int(p.GetReady()), Filling: int(p.GetFilling()),
			Hits: p.GetHits(), Misses: p.GetMisses(), MemoryBytes: p.GetMemoryBytes(),
		})
	}
	return out
}

// PoolTargetsToWire is targets on the wire; nil (leave the pool as it
// is) travels as absent, and an empty list as an empty one.
func PoolTargetsToWire(targets *[]PoolTarget) *nodeapiv1.PoolTargets {
	if targets == nil {
		return nil
	}
	w := &nodeapiv1.PoolTargets{}
	for _, t := range *targets {
		w.Targets = append(w.Targets, &nodeapiv1.PoolTarget{Key: t.PoolKey.toWire(), Size: int64(t.Size), Version: t.Version})
	}
	return w
}

// PoolTargetsFromWire is the targets of w: nil when absent.
func PoolTargetsFromWire(w *nodeapiv1.PoolTargets) *[]PoolTarget {
	if w == nil {
		return nil
	}
	out := []PoolTarget{}
	for _, t := range w.GetTargets() {
		out = append(out, PoolTarget{PoolKey: poolKeyFromWire(t.GetKey()), Size: int(t.GetSize()), Version: t.GetVersion()})
	}
	return &out
}

// RetirementsToWire is rs on the wire.
func RetirementsToWire(rs []Retirement) []*nodeapiv1.Retirement {
	var out []*nodeapiv1.Retirement
	for _, r := range rs {
		out = append(out, &nodeapiv1.Retirement{ExecId: r.ExecID, SandboxId: r.SandboxID, Generation: r.Generation})
	}
	return out
}

// RetirementsFromWire is the retirements of w; none is nil.
func RetirementsFromWire(w []*nodeapiv1.Retirement) []Retirement {
	var out []Retirement
	for _, r := range w {
		out = append(out, Retirement{ExecID: r.GetExecId(), SandboxID: r.GetSandboxId(), Generation: r.GetGeneration()})
	}
	return out
}

// ToWire is req, a request of node nodeID, on the wire.
func (req ResolveCredential) ToWire(nodeID string) *nodeapiv1.ResolveCredentialRequest {
	w := &nodeapiv1.ResolveCredentialRequest{NodeId: nodeID, SandboxId: req.SandboxID, ExecId: req.ExecID, Host: req.Host, CheckOnly: req.CheckOnly}
	if rd := req.Redaction; rd != nil {
		w.Redaction = &nodeapiv1.CredentialRedaction{CredentialId: rd.CredentialID, Where: rd.Where, Count: int64(rd.Count)}
	}
	return w
}

// ResolveCredentialFromWire is the request of w.
func ResolveCredentialFromWire(w *nodeapiv1.ResolveCredentialRequest) ResolveCredential {
	req := ResolveCredential{SandboxID: w.GetSandboxId(), ExecID: w.GetExecId(), Host: w.GetHost(), CheckOnly: w.GetCheckOnly()}
	if rd := w.GetRedaction(); rd != nil {
		req.Redaction = &CredentialRedaction{CredentialID: rd.GetCredentialId(), Where: rd.GetWhere(), Count: int(rd.GetCount())}
	}
	return req
}

// ToWire is c on the wire.
func (c ResolvedCredential) ToWire() *nodeapiv1.ResolveCredentialResponse {
	return &nodeapiv1.ResolveCredentialResponse{Applies: c.Applies, Id: c.ID, Method: c.Method, Name: c.Name, Secret: c.Secret}
}

// ResolvedCredentialFromWire is the credential of w.
func ResolvedCredentialFromWire(w *nodeapiv1.ResolveCredentialResponse) ResolvedCredential {
	return ResolvedCredential{Applies: w.GetApplies(), ID: w.GetId(), Method: w.GetMethod(), Name: w.GetName(), Secret: w.GetSecret()}
}
