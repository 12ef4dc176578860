package server

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/sandboxca"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/sqlite"
)

func TestCASealer(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ca-seal.key")
	a, err := OpenCASealer(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v, %v; want 0600", st.Mode(), err)
	}
	b, err := OpenCASealer(path) // the same key, read back
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("-----BEGIN EC PRIVATE KEY-----\nsecret\n-----END EC PRIVATE KEY-----\n")
	sealed := a.seal("sandbox1", key)
	if bytes.Contains(sealed, []byte("PRIVATE")) || bytes.Contains(sealed, []byte("secret")) {
		t.Fatal("sealed key contains the plaintext")
	}
	if got, err := b.open("sandbox1", sealed); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("open = %q, %v", got, err)
	}
	if _, err := b.open("sandbox2", sealed); err == nil {
		t.Error("a sealed key opened for another sandbox")
	}
	for i := range sealed {
		bad := bytes.Clone(sealed)
		bad[i] ^= 1
		if _, err := a.open("sandbox1", bad); err == nil {
			t.Fatalf("a sealed key with byte %d flipped opened", i)
		}
	}
	for _, bad := range [][]byte{nil, {1}, sealed[:20]} {
		if _, err := a.open("sandbox1", bad); err == nil {
			t.Errorf("open(%x) succeeded", bad)
		}
	}
	other, err := OpenCASealer(filepath.Join(dir, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.open("sandbox1", sealed); err == nil {
		t.Error("a key sealed under another server key opened")
	}
}

func TestOpenCASealerRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.key")
	if _, err := OpenCASealer(good); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open.key")
	data, _ := os.ReadFile(good)
	if err := os.WriteFile(open, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.key")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.key")
	if err := os.WriteFile(garbage, []byte("not hex at all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]string{"readable by others": open, "symbolic link": link, "not a key": garbage, "directory": dir} {
		if _, err := OpenCASealer(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// certOf parses a PEM certificate.
func certOf(t *testing.T, certPEM string) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode([]byte(certPEM))
	if b == nil {
		t.Fatalf("not PEM: %q", certPEM)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSandboxCA: a sandbox gets its CA at create, its owner can read the
// certificate, every start carries certificate and key, and a fork gets
// a CA of its own.
func TestSandboxCA(t *testing.T) {
	cp := newCredPlane(t)
	sb := cp.with(t).create(`{"template":"minimal"}`)
	rec, err := cp.st.GetSandboxByID(t.Context(), sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.CACert == "" || len(rec.CAKey) == 0 || bytes.Contains(rec.CAKey, []byte("PRIVATE KEY")) {
		t.Fatalf("stored CA: cert %d bytes, key %d bytes (sealed: %t)", len(rec.CACert), len(rec.CAKey), !bytes.Contains(rec.CAKey, []byte("PRIVATE KEY")))
	}
	cert := certOf(t, rec.CACert)
	if !cert.IsCA || cert.Subject.CommonName != "SPACE sandbox "+sb.ID {
		t.Errorf("CA certificate: IsCA %t, CN %q", cert.IsCA, cert.Subject.CommonName)
	}

	code, body := cp.call(t, cp.key, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/ca.pem", "")
	if code != http.StatusOK || string(body) != rec.CACert {
		t.Errorf("GET ca.pem: HTTP %d %q, want the stored certificate", code, body)
	}
	if code, _ := cp.call(t, cp.other, http.MethodGet, "/v1/sandboxes/"+sb.ID+"/ca.pem", ""); code != http.StatusNotFound {
		t.Errorf("other tenant's GET ca.pem: HTTP %d, want 404", code)
	}
	if bytes.Contains(body, []byte("PRIVATE")) {
		t.Error("ca.pem contains a private key")
	}

	start := cp.node.lastStart(t, sb.ID)
	if start.CA == nil || start.CA.CertPEM != rec.CACert {
		t.Fatalf("StartExecution CA = %+v, want the sandbox's", start.CA)
	}
	if _, _, err := sandboxca.Parse([]byte(start.CA.CertPEM), []byte(start.CA.KeyPEM)); err != nil {
		t.Errorf("the node cannot load the CA it was sent: %v", err)
	}

	// Fork from a snapshot of the parent.
	snap := store.Snapshot{ID: sandbox.NewSnapshotID(), SandboxID: sb.ID, Tenant: cp.tenant, Kind: store.SnapshotDisk, Tier: "manual",
		State: store.SnapshotReady, Node: "n1", Runtime: rec.Runtime, Template: rec.Template, CPUs: rec.CPUs, MemoryMiB: rec.MemoryMiB,
		Generation: rec.Generation, CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	if err := cp.st.CreateSnapshot(t.Context(), snap); err != nil {
		t.Fatal(err)
	}
	code, body = cp.call(t, cp.key, http.MethodPost, "/v1/sandboxes/"+sb.ID+"/fork", `{"snapshot":"`+snap.ID+`"}`)
	var fork sandboxv1.Sandbox
	if err := json.Unmarshal(body, &fork); code != http.StatusCreated || err != nil {
		t.Fatalf("fork: HTTP %d %s", code, body)
	}
	frec, err := cp.st.GetSandboxByID(t.Context(), fork.ID)
	if err != nil {
		t.Fatal(err)
	}
	if frec.CACert == "" || frec.CACert == rec.CACert || bytes.Equal(frec.CAKey, rec.CAKey) {
		t.Fatal("the fork does not have a CA of its own")
	}
	if cn := certOf(t, frec.CACert).Subject.CommonName; cn != "SPACE sandbox "+fork.ID {
		t.Errorf("fork CA CN = %q", cn)
	}
	fstart := cp.node.lastStart(t, fork.ID)
	if fstart.CA == nil || fstart.CA.CertPEM != frec.CACert || fstart.CA.KeyPEM == start.CA.KeyPEM {
		t.Error("the fork's start does not carry the fork's own CA")
	}
}

// TestStartCALazy: a sandbox recorded before CAs existed gets one at its
// next start, kept for later starts; one sealed under a lost key is
// replaced, with an event saying why.
func TestStartCALazy(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "space.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sealer, err := OpenCASealer(filepath.Join(dir, "ca-seal.key"))
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{CASealer: sealer}, st, NewNodes(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	tn := store.Tenant{ID: sandbox.NewTenantID(), Name: "a", CreatedAt: time.Now().UTC()}
	if err := st.CreateTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	sb := sandbox.New(tn.ID, sandbox.Spec{Template: "minimal", Runtime: "ns", CPUs: 1, MemoryMiB: 256, DiskMiB: 512}, time.Now())
	if err := st.CreateSandbox(ctx, sb); err != nil {
		t.Fatal(err)
	}
	ca, err := srv.StartCA(ctx, sb)
	if err != nil || ca == nil {
		t.Fatalf("StartCA = %v, %v", ca, err)
	}
	stored, _ := st.GetSandboxByID(ctx, sb.ID)
	if stored.CACert != ca.CertPEM || sb.Version != stored.Version {
		t.Fatalf("the new CA was not stored (or sb not updated in place): version %d/%d", sb.Version, stored.Version)
	}
	again, err := srv.StartCA(ctx, stored)
	if err != nil || again.CertPEM != ca.CertPEM || again.KeyPEM != ca.KeyPEM {
		t.Fatalf("second StartCA changed the CA: %v", err)
	}

	// The server's sealing key was replaced: the old sealed key does not
	// open, so the sandbox gets a new CA.
	other, _ := OpenCASealer(filepath.Join(dir, "replaced.key"))
	srv2 := New(Config{CASealer: other}, st, NewNodes(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	renewed, err := srv2.StartCA(ctx, stored)
	if err != nil || renewed.CertPEM == ca.CertPEM {
		t.Fatalf("StartCA under another sealing key = %v; want a new CA", err)
	}
	events, _ := st.ListEvents(ctx, sb.ID)
	if len(events) != 2 || events[1].Type != "ca" || !strings.Contains(events[1].Message, "does not open") {
		t.Errorf("events = %+v, want two CA events, the second saying the old key does not open", events)
	}

	// Without a sealer: no CA.
	srv3 := New(Config{}, st, NewNodes(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if ca, err := srv3.StartCA(ctx, stored); ca != nil || err != nil {
		t.Errorf("StartCA without a sealer = %v, %v; want none", ca, err)
	}
}
