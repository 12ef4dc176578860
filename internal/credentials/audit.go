package credentials

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Audit entry kinds (AuditEntry.Kind).
const (
	// KindResolve records one resolution attempt; it is the kind of an
	// entry whose Kind is empty.
	KindResolve = ""
	// KindRedaction records that the gateway removed a credential's secret
	// from a response before the sandbox could read it.
	KindRedaction = "redaction"
)

// AuditEntry records one resolution attempt, or one response a secret was
// removed from (Kind). It names the credential, never its secret.
type AuditEntry struct {
	// Kind is KindResolve (empty) or KindRedaction.
	Kind string `json:"kind,omitempty"`
	// Time is when the attempt was decided (the Manager's clock).
	Time time.Time `json:"time"`
	// Tenant, Project, Sandbox and ExecutionID say who asked.
	Tenant      string `json:"tenant"`
	Project     string `json:"project,omitempty"`
	Sandbox     string `json:"sandbox,omitempty"`
	ExecutionID string `json:"execution_id,omitempty"`
	// Host is the destination the credential was asked for.
	Host string `json:"host"`
	// CredentialID is the credential chosen or refused; empty when none
	// applied.
	CredentialID string `json:"credential_id,omitempty"`
	// Allowed reports whether a credential was handed out.
	Allowed bool `json:"allowed"`
	// Reason says why, in a few words ("resolved", "rate limited", ...).
	Reason string `json:"reason"`
	// Where says, for a redaction, which parts of the response held the
	// secret: "header", "body", or "header,body" (the status line and
	// trailers count as header).
	Where string `json:"where,omitempty"`
	// Count is, for a redaction, how many occurrences were removed.
	Count int `json:"count,omitempty"`
}

// AuditLog keeps AuditEntry records, append-only. Record returns only once
// the entry is as durable as the implementation promises; the Manager
// refuses the credential when it fails. Implementations are safe for
// concurrent use.
type AuditLog interface {
	Record(ctx context.Context, e AuditEntry) error
}

// MemoryAuditLog is an AuditLog in memory, for tests. Its zero value is
// ready to use.
type MemoryAuditLog struct {
	mu      sync.Mutex // guards entries
	entries []AuditEntry
}

// Record implements AuditLog.
func (m *MemoryAuditLog) Record(_ context.Context, e AuditEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries = append(m.entries, e)
	return nil
}

// Entries returns a copy of what was recorded, oldest first.
func (m *MemoryAuditLog) Entries() []AuditEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.entries)
}

// FileAuditLog appends entries to a file as JSON lines.
//
// Durability: every Record writes its line with one write(2) on a file
// opened O_APPEND and then fsyncs before returning, so an entry a caller was
// told about survives a crash, and lines from several processes appending to
// the same file never interleave. An fsync per record costs a few
// milliseconds on slow disks; resolutions happen once per intercepted
// connection and are rate limited, and an audit trail that loses the last
// second of accesses after a crash is the wrong trade for a security log.
// Batching (group commit) can come later behind the same interface.
//
// The file is created mode 0600 and must be a regular file owned by no one
// else's group or world bits; a symbolic link in its place is refused.
type FileAuditLog struct {
	mu   sync.Mutex // guards f and serialises write+fsync
	f    *os.File
	path string
}

// OpenFileAuditLog opens (creating it if needed) the audit file at path for
// appending.
func OpenFileAuditLog(path string) (*FileAuditLog, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("audit log %s: is a symbolic link; point the configuration at the real file: %w", path, errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("audit log %s: open: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit log %s: stat: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("audit log %s: not a regular file: %w", path, errdefs.ErrFailedPrecondition)
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		f.Close()
		return nil, fmt.Errorf("audit log %s: mode %#o lets others read it; run chmod 600 on it: %w", path, perm, errdefs.ErrFailedPrecondition)
	}
	return &FileAuditLog{f: f, path: path}, nil
}

// Record implements AuditLog: one line, written and fsynced.
func (l *FileAuditLog) Record(_ context.Context, e AuditEntry) error {
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("audit log %s: encode: %w", l.path, err)
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return fmt.Errorf("audit log %s: closed: %w", l.path, errdefs.ErrFailedPrecondition)
	}
	if _, err := l.f.Write(line); err != nil {
		return fmt.Errorf("audit log %s: append: %w: %w", l.path, err, errdefs.ErrUnavailable)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("audit log %s: fsync: %w: %w", l.path, err, errdefs.ErrUnavailable)
	}
	return nil
}

// Close closes the file; later Records fail.
func (l *FileAuditLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
