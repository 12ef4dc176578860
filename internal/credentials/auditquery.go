package credentials

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/errdefs"
)

// Bounds of an audit query.
const (
	DefaultAuditLimit = 100
	MaxAuditLimit     = 1000
	// maxAuditLine bounds one line read back: an entry's strings are cut to
	// 256 bytes each, so a longer line is not one this package wrote.
	maxAuditLine = 16 << 10
)

// AuditQuery selects entries in FileAuditLog.Query. Tenant is required;
// empty Sandbox and CredentialID match every entry of the tenant.
type AuditQuery struct {
	Tenant       string
	Sandbox      string
	CredentialID string
	// Limit is how many entries to return at most: 0 means
	// DefaultAuditLimit, more than MaxAuditLimit is cut to it.
	Limit int
}

// Query reads the audit file back and returns the newest entries matching
// q, newest first. Lines that do not parse are skipped: the last one may be
// torn by a crash in the middle of its write (it has no newline yet), and
// an entry that does not decode is no entry at all. It reads the whole file
// once per call, which is fine for the sizes a node's or control plane's
// log reaches between rotations; an index is the next step if it is not.
func (l *FileAuditLog) Query(ctx context.Context, q AuditQuery) ([]AuditEntry, error) {
	if q.Tenant == "" {
		return nil, fmt.Errorf("audit query: tenant required: %w", errdefs.ErrInvalidArgument)
	}
	limit := q.Limit
	switch {
	case limit < 0:
		return nil, fmt.Errorf("audit query: limit %d: want 0 to %d: %w", limit, MaxAuditLimit, errdefs.ErrInvalidArgument)
	case limit == 0:
		limit = DefaultAuditLimit
	case limit > MaxAuditLimit:
		limit = MaxAuditLimit
	}
	fd, err := unix.Open(l.path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: open for reading: %w: %w", l.path, err, errdefs.ErrUnavailable)
	}
	f := os.NewFile(uintptr(fd), l.path)
	defer f.Close()
	ring := make([]AuditEntry, 0, limit)
	next := 0 // where the next match goes once ring is full
	err = scanAudit(ctx, f, func(e AuditEntry) {
		if !q.matches(e) {
			return
		}
		if len(ring) < limit {
			ring = append(ring, e)
			return
		}
		ring[next] = e
		next = (next + 1) % limit
	})
	if err != nil {
		return nil, fmt.Errorf("audit log %s: read: %w", l.path, err)
	}
	// ring[next:] then ring[:next] is oldest to newest; reverse it.
	out := make([]AuditEntry, 0, len(ring))
	for i := len(ring) - 1; i >= 0; i-- {
		out = append(out, ring[(next+i)%len(ring)])
	}
	return out, nil
}

func (q AuditQuery) matches(e AuditEntry) bool {
	return e.Tenant == q.Tenant &&
		(q.Sandbox == "" || e.Sandbox == q.Sandbox) &&
		(q.CredentialID == "" || e.CredentialID == q.CredentialID)
}

// scanAudit calls fn with every complete, well-formed line of r in order.
// A line longer than maxAuditLine is skipped whole; a last line without a
// newline is torn and skipped.
func scanAudit(ctx context.Context, r io.Reader, fn func(AuditEntry)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	tooLong := false
	for n := 0; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		chunk, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if len(line)+len(chunk) > maxAuditLine {
				tooLong, line = true, line[:0]
			} else if !tooLong {
				line = append(line, chunk...)
			}
			continue
		case errors.Is(err, io.EOF):
			return nil // a torn last line, or none
		case err != nil:
			return fmt.Errorf("%w: %w", err, errdefs.ErrUnavailable)
		}
		if !tooLong && len(line)+len(chunk) <= maxAuditLine {
			line = append(line, chunk...)
			if e, ok := parseAuditLine(bytes.TrimSuffix(line, []byte("\n"))); ok {
				fn(e)
			}
		}
		line, tooLong = line[:0], false
	}
}

// entryStart begins every line Record writes (Time is AuditEntry's first
// field). Inside a JSON string a quote is escaped, so it cannot occur in a
// field's value.
var entryStart = []byte(`{"time":`)

// parseAuditLine decodes one line. A line that does not decode may be the
// torn fragment a crash left, with the next Record's complete entry
// appended to it: that entry, from the last entryStart on, is recovered.
func parseAuditLine(line []byte) (AuditEntry, bool) {
	var e AuditEntry
	if json.Unmarshal(line, &e) == nil {
		return e, true
	}
	if i := bytes.LastIndex(line, entryStart); i > 0 && json.Unmarshal(line[i:], &e) == nil {
		return e, true
	}
	return AuditEntry{}, false
}
