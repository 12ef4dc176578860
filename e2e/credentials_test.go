package e2e

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/testenv"
	space "github.com/spacesandbox/space/sdk/go"
)

// Upstreams of the credential test, inside the egress namespace.
const (
	upSecret = "20.0.0.20" // api.secret.test: has a credential rule
	upOther  = "20.0.0.21" // api.other.test: allowed, no credential
)

// seenHeaders records the Authorization headers an upstream received.
type seenHeaders struct {
	mu  sync.Mutex
	got []string
}

func (s *seenHeaders) add(v string) { s.mu.Lock(); s.got = append(s.got, v); s.mu.Unlock() }
func (s *seenHeaders) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

// serveHTTPS serves TLS on addr:443 in the egress namespace with a
// certificate for host; it records each request's Authorization and never
// echoes it.
func (e *egressNet) serveHTTPS(t *testing.T, pki *testenv.UpstreamCA, addr, host string) *seenHeaders {
	ln := e.listen(func() (any, error) { return net.Listen("tcp", addr+":443") }).(net.Listener)
	seen := &seenHeaders{}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			auth := r.Header.Get("Authorization")
			seen.add(auth)
			if r.URL.Path == "/echo" {
				// An upstream that reflects the credential back, in a
				// header and in the body raw, base64'd, URL-encoded and
				// JSON-escaped.
				w.Header().Set("X-Echo-Authorization", auth)
				w.Header().Set("Location", "https://elsewhere.test/?token="+url.QueryEscape(auth))
				js, _ := json.Marshal(map[string]string{"authorization": auth})
				fmt.Fprintf(w, "echo %s\n%s\n%s\n%s\n", auth, base64.StdEncoding.EncodeToString([]byte(auth)), url.QueryEscape(auth), js)
				return
			}
			fmt.Fprintf(w, "hello from %s", host)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pki.Leaf(t, host)}},
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	return seen
}

func TestCredentialInjection(t *testing.T) { testCredentialInjection(t, "ns") }

// TestCredentialInjectionVM: the same with a microVM guest (its trust store
// is written through the guest daemon over virtio-serial).
func TestCredentialInjectionVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	testCredentialInjection(t, "vm")
}

func testCredentialInjection(t *testing.T, runtime string) {
	const secret = "sk-live-e2e-5eCr3t-value-0042"
	e := newEgressNet(t)
	pki := testenv.NewUpstreamCA(t, "e2e upstream CA")
	secretSeen := e.serveHTTPS(t, pki, upSecret, "api.secret.test")
	otherSeen := e.serveHTTPS(t, pki, upOther, "api.other.test")
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, pki.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	in := startServerWith(t, t.TempDir(), append(e.serverFlags(), "--gateway-upstream-ca", caFile)...)
	sb := in.createWithEgress(runtime, map[string]any{"allow_internet": false, "allow": map[string]any{"domains": []string{"api.secret.test", "api.other.test"}}})

	var cred map[string]any
	code := in.do("POST", "/v1/credentials", map[string]any{
		"name": "secret-api", "secret": secret, "injection": map[string]any{"method": "header", "name": "Authorization"},
		"allowed_hosts": []string{"api.secret.test"}, "sandbox": sb.ID, "rate_limit": 3,
	}, &cred)
	if code != http.StatusCreated {
		t.Fatalf("create credential: HTTP %d %v", code, cred)
	}
	if strings.Contains(fmt.Sprint(cred), secret) {
		t.Fatalf("the create answer carries the secret: %v", cred)
	}
	if code := in.do("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/usr/local/bin/httpsget", buildTestBinary(t, "httpsget"), nil); code/100 != 2 {
		t.Fatalf("upload httpsget: HTTP %d", code)
	}
	in.sh(sb.ID, "chmod 755 /usr/local/bin/httpsget")

	// The host with the rule gets the secret; the guest sent a placeholder
	// and its TLS was with the sandbox's CA, which it trusts.
	r := in.sh(sb.ID, "httpsget -H 'Authorization: placeholder' https://api.secret.test/")
	if r.ExitCode != 0 || !strings.HasPrefix(r.Stdout, "200\nhello from api.secret.test") {
		t.Fatalf("GET api.secret.test from the sandbox: %+v\n%s", r, in.logs())
	}
	if got := secretSeen.all(); len(got) != 1 || got[0] != secret {
		t.Fatalf("api.secret.test received Authorization %q, want the secret", got)
	}
	// A host without the rule never carries it (its TLS is not even
	// intercepted: the guest reaches the real certificate, hence -k).
	r = in.sh(sb.ID, "httpsget -k -H 'Authorization: placeholder' https://api.other.test/")
	if r.ExitCode != 0 || !strings.HasPrefix(r.Stdout, "200\n") {
		t.Fatalf("GET api.other.test: %+v", r)
	}
	if got := otherSeen.all(); len(got) != 1 || got[0] != "placeholder" {
		t.Fatalf("api.other.test received Authorization %q, want the guest's placeholder", got)
	}
	// Without -k a client that does not trust the upstream's real CA fails:
	// only intercepted hosts are re-signed.
	if r := in.sh(sb.ID, "httpsget https://api.other.test/"); r.ExitCode == 0 {
		t.Errorf("api.other.test's certificate was accepted without its CA: %+v", r)
	}

	// The secret is nowhere in the sandbox: environment, files, /proc.
	// The pattern matches the secret without containing it, so grep's own
	// command line does not match.
	pattern := secret[:len(secret)-1] + "[" + secret[len(secret)-1:] + "]"
	r = in.sh(sb.ID, "grep -rl '"+pattern+"' /etc /usr/local /tmp /root /home /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null; env | grep -c '"+pattern+"'")
	if strings.Contains(r.Stdout, "/") || strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("the secret is visible inside the sandbox: %q", r.Stdout)
	}

	// An upstream that echoes the credential: the sandbox reads the answer
	// with every form of the secret removed, and the audit log says so.
	r = in.sh(sb.ID, "httpsget -i -H 'Authorization: placeholder' https://api.secret.test/echo")
	if r.ExitCode != 0 || !strings.HasPrefix(r.Stdout, "200\n") || !strings.Contains(r.Stdout, "echo ***") {
		t.Fatalf("GET api.secret.test/echo: %+v", r)
	}
	js, _ := json.Marshal(secret)
	for _, form := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret))[:36], url.QueryEscape(secret), string(js[1 : len(js)-1])} {
		if strings.Contains(r.Stdout, form) || strings.Contains(r.Stderr, form) {
			t.Errorf("the sandbox read the secret as %q from an echoing upstream:\n%s", form, r.Stdout)
		}
	}
	// Rate limit (a bucket of 3, refilled at 3 a minute, two used): of
	// six quick requests at least one is refused by the gateway with 429,
	// and a refused one never reaches the upstream. (The bucket refills a
	// use every 20 s, which a slow emulated VM may take to get here, so the
	// count of answered requests is not fixed.)
	r = in.sh(sb.ID, "for i in 1 2 3 4 5 6; do httpsget https://api.secret.test/ | head -n 1; done")
	answered := 2 + strings.Count(r.Stdout, "200\n")
	if strings.Count(r.Stdout, "429\n") == 0 || answered+strings.Count(r.Stdout, "429\n") != 8 {
		t.Errorf("six requests over the rate limit answered %q, want 200 or 429 each and at least one 429", r.Stdout)
	}
	if n := len(secretSeen.all()); n != answered {
		t.Errorf("api.secret.test got %d requests, want the %d answered ones (a refused request reached it)", n, answered)
	}

	// Every resolution is audited, the refused one too.
	var audit struct {
		Entries []map[string]any `json:"entries"`
	}
	if code := in.do("GET", "/v1/credentials/audit?sandbox="+sb.ID, nil, &audit); code != http.StatusOK {
		t.Fatalf("audit: HTTP %d", code)
	}
	allowed, refused, redacted := 0, 0, 0
	for _, e := range audit.Entries {
		if e["kind"] == "redaction" {
			if e["host"] != "api.secret.test" || e["credential_id"] != cred["id"] || e["count"] == nil {
				t.Errorf("redaction entry %v, want the credential on api.secret.test", e)
			}
			redacted++
			continue
		}
		if e["allowed"] == true {
			allowed++
		} else {
			refused++
		}
	}
	if allowed != answered || refused < 1 {
		t.Errorf("audit: %d allowed, %d refused (%v); want %d and at least 1", allowed, refused, audit.Entries, answered)
	}
	if redacted < 2 { // the header and the body of the echo
		t.Errorf("audit: %d redaction entries (%v); want the echo's header and body", redacted, audit.Entries)
	}
	// The SDKs list the same entries: the Go SDK's CredentialAudit and the
	// Python SDK's credential_audit each find an allowed injection of this
	// credential on api.secret.test, recorded by the requests above.
	checkSDKAudit(t, in, sb.ID, cred["id"].(string))
	if strings.Contains(in.logs(), secret) {
		t.Error("the secret appears in the server's log")
	}
}

// checkSDKAudit: the Go and the Python SDK list an allowed injection of
// credential credID on api.secret.test for sandbox sbID.
func checkSDKAudit(t *testing.T, in *instance, sbID, credID string) {
	t.Helper()
	entries, err := space.NewClient(in.url, in.key).CredentialAudit(t.Context(), space.CredentialAuditQuery{Sandbox: sbID, Credential: credID})
	if err != nil {
		t.Fatalf("Go SDK CredentialAudit: %v", err)
	}
	found := false
	for _, e := range entries {
		if e.Sandbox != sbID || e.CredentialID != credID {
			t.Errorf("Go SDK CredentialAudit(sandbox %s, credential %s) returned %+v", sbID, credID, e)
		}
		found = found || (e.Allowed && e.Host == "api.secret.test" && e.Kind != "redaction")
	}
	if !found {
		t.Errorf("Go SDK CredentialAudit: no allowed injection on api.secret.test in %+v", entries)
	}
	python := testenv.PythonVenv(t, "space-sandbox", "../sdk/python/requirements-test.txt")
	src, err := filepath.Abs("../sdk/python/src")
	if err != nil {
		t.Fatal(err)
	}
	script := `import sys, space_sandbox as ss
with ss.Client() as c:
    es = c.credential_audit(sandbox=sys.argv[1], credential=sys.argv[2])
    hit = [e for e in es if e.allowed and e.host == "api.secret.test" and e.kind != "redaction" and e.sandbox == sys.argv[1] and e.credential_id == sys.argv[2] and e.time is not None]
    if not hit:
        sys.exit(f"credential_audit: no allowed injection on api.secret.test in {es}")
    print(len(hit), "injection entries")
`
	cmd := exec.CommandContext(t.Context(), python, "-c", script, sbID, credID)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+src, "PYTHONDONTWRITEBYTECODE=1", "SPACE_API_URL="+in.url, "SPACE_API_KEY="+in.key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("Python SDK credential_audit: %v\n%s", err, out)
	}
	t.Logf("Python SDK credential_audit: %s", out)
}
