package localkms

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestKeyUseAuditFailsClosed: every wrap and unwrap is in the audit log
// (one fsynced JSON line naming the key and its tenant) before it answers;
// when the log cannot be written (a full disk, a closed file) the key is
// not used and the caller gets Unavailable saying why.
func TestKeyUseAuditFailsClosed(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	k := open(t, filepath.Join(dir, "kms"))
	path := filepath.Join(dir, "kms-audit.log")
	audit, err := OpenAuditFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { audit.Close() })
	k.SetAuditor(audit)
	id, err := k.CreateKey(ctx, "t-acme")
	if err != nil {
		t.Fatal(err)
	}
	dataKey := bytes.Repeat([]byte{7}, 32)
	wrapped, err := k.WrapKey(ctx, id, dataKey, []byte("aad"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.UnwrapKey(ctx, id, wrapped, []byte("aad")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var u KeyUse
		if err := json.Unmarshal(sc.Bytes(), &u); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if u.KeyID != id || u.Tenant != "t-acme" || u.Time.IsZero() {
			t.Errorf("audit line %+v, want key %s of t-acme with a time", u, id)
		}
		ops = append(ops, u.Op)
	}
	f.Close()
	if strings.Join(ops, ",") != "wrap,unwrap" {
		t.Errorf("audited ops %v, want wrap, unwrap", ops)
	}

	// The disk is full: the log cannot be written.
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	audit.mu.Lock()
	audit.f.Close()
	audit.f = full
	audit.mu.Unlock()
	if _, err := k.WrapKey(ctx, id, dataKey, []byte("aad")); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "cannot be audited") {
		t.Errorf("wrap with the audit log on a full disk: err = %v, want Unavailable: cannot be audited", err)
	}
	if got, err := k.UnwrapKey(ctx, id, wrapped, []byte("aad")); !errdefs.IsUnavailable(err) || got != nil {
		t.Errorf("unwrap with the audit log on a full disk: %x, %v; want Unavailable and no key", got, err)
	}
	// Closed: refused too.
	audit.Close()
	if _, err := k.UnwrapKey(ctx, id, wrapped, []byte("aad")); !errdefs.IsUnavailable(err) {
		t.Errorf("unwrap with the audit log closed: err = %v, want Unavailable", err)
	}
}

// TestAuditFileRefusesALink: the audit log is not followed through a
// symbolic link, nor kept readable by others.
func TestAuditFileRefusesALink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "kms-audit.log")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenAuditFile(link); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("audit log through a link: err = %v, want FailedPrecondition", err)
	}
	open := filepath.Join(dir, "readable.log")
	if err := os.WriteFile(open, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenAuditFile(open); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("audit log readable by others: err = %v, want FailedPrecondition", err)
	}
}
