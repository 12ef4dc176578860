package localkms

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// KeyUse is one audited use of a tenant key: a line of the audit log.
type KeyUse struct {
	Time   time.Time `json:"time"`
	Op     string    `json:"op"` // "wrap" or "unwrap"
	KeyID  string    `json:"key_id"`
	Tenant string    `json:"tenant"`
}

// Auditor records key uses. WrapKey and UnwrapKey of a KMS with an auditor
// answer only once the use is recorded: an auditor that fails refuses the
// use (fail closed), so no key is used that the trail does not show.
type Auditor interface {
	Record(ctx context.Context, u KeyUse) error
}

// SetAuditor makes every later WrapKey and UnwrapKey record its use with a
// first, and refuse when that fails. nil audits nothing.
func (k *KMS) SetAuditor(a Auditor) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.audit = a
}

// record audits one use; without an auditor it records nothing.
func (k *KMS) record(ctx context.Context, op, keyID, tenant string) error {
	k.mu.Lock()
	a := k.audit
	k.mu.Unlock()
	if a == nil {
		return nil
	}
	if err := a.Record(ctx, KeyUse{Time: k.now().UTC(), Op: op, KeyID: keyID, Tenant: tenant}); err != nil {
		return fmt.Errorf("%s with key %s refused: its use cannot be audited (free space or fix the audit log, then retry): %w", op, keyID, err)
	}
	return nil
}

// AuditFile is an Auditor appending JSON lines to a file, each written with
// one write(2) on a file opened O_APPEND and fsynced before Record returns
// (so a use a caller was answered for survives a crash, and several
// processes may share the file). The file is created mode 0600; a symbolic
// link in its place, a file that is not regular or one others can read is
// refused.
type AuditFile struct {
	mu   sync.Mutex // guards f; serialises write and fsync
	f    *os.File
	path string
}

// OpenAuditFile opens (creating it when missing) the audit log at path.
func OpenAuditFile(path string) (*AuditFile, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("kms audit log %s: is a symbolic link; point the configuration at the real file: %w", path, errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("kms audit log %s: open: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("kms audit log %s: stat: %w: %w", path, err, errdefs.ErrUnavailable)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("kms audit log %s: not a regular file: %w", path, errdefs.ErrFailedPrecondition)
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		f.Close()
		return nil, fmt.Errorf("kms audit log %s: mode %#o lets others read it; run chmod 600 on it: %w", path, perm, errdefs.ErrFailedPrecondition)
	}
	return &AuditFile{f: f, path: path}, nil
}

// Record implements Auditor: one line, written and fsynced.
func (a *AuditFile) Record(_ context.Context, u KeyUse) error {
	line, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("kms audit log %s: encode: %w", a.path, err)
	}
	line = append(line, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return fmt.Errorf("kms audit log %s: closed: %w", a.path, errdefs.ErrUnavailable)
	}
	if _, err := a.f.Write(line); err != nil {
		return fmt.Errorf("kms audit log %s: append: %w: %w", a.path, err, errdefs.ErrUnavailable)
	}
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("kms audit log %s: fsync: %w: %w", a.path, err, errdefs.ErrUnavailable)
	}
	return nil
}

// Close closes the file; later Records fail.
func (a *AuditFile) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}
