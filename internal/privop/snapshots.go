package privop

import (
	"time"
)

// Snapshot kinds.
const (
	// SnapshotDisk is the root filesystem alone, taken while the sandbox runs.
	SnapshotDisk = "disk"
	// SnapshotFull is memory, device state and disk: the VM resumes from it
	// exactly where it was.
	SnapshotFull = "full"
)

// SnapshotArgs asks for a snapshot of a running or paused execution.
type SnapshotArgs struct {
	SnapshotID string `json:"snapshot_id"`
	ExecID     string `json:"exec_id"`
	Runtime    string `json:"runtime"`
	// Kind is SnapshotDisk or SnapshotFull.
	Kind string `json:"kind"`
	// SandboxID and Template are recorded in the snapshot's metadata.
	SandboxID string `json:"sandbox_id"`
	Template  string `json:"template"`
	// LeavePaused keeps the VM paused after a full snapshot (hibernate and
	// stop tear it down next); otherwise it continues.
	LeavePaused bool `json:"leave_paused,omitempty"`
}

// SnapshotInfo describes a snapshot on the node.
type SnapshotInfo struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	Runtime   string    `json:"runtime"`
	SandboxID string    `json:"sandbox_id"`
	Template  string    `json:"template"`
	CreatedAt time.Time `json:"created_at"`
	// SizeBytes is what the snapshot's files hold (data, not holes).
	SizeBytes int64 `json:"size_bytes"`
	// MemoryMiB and CPUs are the size of a full snapshot's VM; a restore
	// must ask for the same.
	MemoryMiB int `json:"memory_mib,omitempty"`
	CPUs      int `json:"cpus,omitempty"`
}

// ValidSnapshotID reports whether id is a well-formed snapshot id.
func ValidSnapshotID(id string) error {
	if !execIDPattern.MatchString(id) {
		return invalid("snapshot id %q: want 1-64 of [a-z0-9-], starting with a letter or digit", id)
	}
	return nil
}

func (a *SnapshotArgs) Validate() error {
	if a == nil {
		return invalid("snapshot: missing arguments")
	}
	if err := ValidSnapshotID(a.SnapshotID); err != nil {
		return err
	}
	if err := ValidExecID(a.ExecID); err != nil {
		return err
	}
	if a.Kind != SnapshotDisk && a.Kind != SnapshotFull {
		return invalid("snapshot kind %q: want disk or full", a.Kind)
	}
	if !execIDPattern.MatchString(a.SandboxID) {
		return invalid("sandbox id %q is malformed", a.SandboxID)
	}
	return ValidTemplateName(a.Template)
}
