package intercept

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

func newTestCA(t testing.TB) (*CA, *x509.CertPool) {
	t.Helper()
	ca, err := NewCA("space sandbox sb1")
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("CertPEM does not parse as a PEM certificate")
	}
	return ca, pool
}

func TestNewCA(t *testing.T) {
	before := time.Now()
	ca, _ := newTestCA(t)
	block, rest := pem.Decode(ca.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" || len(rest) != 0 {
		t.Fatalf("CertPEM: want exactly one CERTIFICATE block, got %v (rest %d bytes)", block, len(rest))
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("basic constraints: IsCA %v valid %v MaxPathLen %d zero %v; want a CA with path length 0",
			c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage != x509.KeyUsageCertSign {
		t.Errorf("KeyUsage = %v, want CertSign only", c.KeyUsage)
	}
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want ECDSA P-256", c.PublicKey)
	}
	if !c.NotBefore.Before(before) {
		t.Errorf("NotBefore %v is not backdated before %v", c.NotBefore, before)
	}
	if got := c.NotAfter.Sub(before); got < CAValidity-time.Minute || got > CAValidity+time.Minute {
		t.Errorf("CA valid for %v, want about %v", got, CAValidity)
	}
	if c.Subject.CommonName != "space sandbox sb1" {
		t.Errorf("CommonName = %q", c.Subject.CommonName)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	// CertPEM hands out a copy.
	p := ca.CertPEM()
	p[0] = 'X'
	if ca.CertPEM()[0] != '-' {
		t.Error("modifying CertPEM's result changed the CA")
	}
	if _, err := NewCA(""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("NewCA(\"\") = %v, want ErrInvalidArgument", err)
	}
}

// The CA's private key never leaves the process: nothing exported returns it.
func TestCAExportsNoKey(t *testing.T) {
	typ := reflect.TypeFor[*CA]()
	var names []string
	for i := range typ.NumMethod() {
		names = append(names, typ.Method(i).Name)
	}
	if want := []string{"CertPEM", "Certificate"}; !reflect.DeepEqual(names, want) {
		t.Errorf("*CA methods = %v, want %v; a new method must not expose the key", names, want)
	}
	for i := range typ.Elem().NumField() {
		if f := typ.Elem().Field(i); f.IsExported() {
			t.Errorf("CA has exported field %s", f.Name)
		}
	}
}

func TestLeafVerifies(t *testing.T) {
	ca, pool := newTestCA(t)
	tests := []struct {
		host, verifyAs, wrong string
		ip                    bool
	}{
		{host: "api.example.com", verifyAs: "api.example.com", wrong: "other.example.com"},
		{host: "API.Example.COM.", verifyAs: "api.example.com", wrong: "example.com"},
		{host: "127.0.0.1", verifyAs: "127.0.0.1", wrong: "127.0.0.2", ip: true},
		{host: "2001:db8::1", verifyAs: "2001:db8::1", wrong: "2001:db8::2", ip: true},
		{host: "[2001:db8::1]", verifyAs: "2001:db8::1", wrong: "api.example.com", ip: true},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			cert, err := ca.Certificate(tt.host)
			if err != nil {
				t.Fatalf("Certificate(%q): %v", tt.host, err)
			}
			leaf := cert.Leaf
			opts := x509.VerifyOptions{Roots: pool, DNSName: tt.verifyAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			if _, err := leaf.Verify(opts); err != nil {
				t.Errorf("leaf does not verify for %s: %v", tt.verifyAs, err)
			}
			opts.DNSName = tt.wrong
			if _, err := leaf.Verify(opts); err == nil {
				t.Errorf("leaf verifies for %s too", tt.wrong)
			}
			if tt.ip && (len(leaf.IPAddresses) != 1 || len(leaf.DNSNames) != 0) {
				t.Errorf("IP leaf SANs: DNS %v IP %v, want the one IP", leaf.DNSNames, leaf.IPAddresses)
			}
			if !tt.ip && (len(leaf.DNSNames) != 1 || len(leaf.IPAddresses) != 0) {
				t.Errorf("DNS leaf SANs: DNS %v IP %v, want the one name", leaf.DNSNames, leaf.IPAddresses)
			}
			if leaf.IsCA {
				t.Error("leaf is a CA")
			}
			if d := leaf.NotAfter.Sub(leaf.NotBefore); d < LeafValidity || d > LeafValidity+clockSkew+time.Minute {
				t.Errorf("leaf valid for %v, want about %v", d, LeafValidity)
			}
		})
	}
}

func TestCertificateRejectsBadHosts(t *testing.T) {
	ca, _ := newTestCA(t)
	for _, h := range []string{"", "bad host", "*.example.com", "a..b", "fe80::1%eth0", "example.com:443"} {
		if _, err := ca.Certificate(h); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Certificate(%q) error = %v, want ErrInvalidArgument", h, err)
		}
	}
}

func TestLeafCache(t *testing.T) {
	ca, _ := newTestCA(t)
	a, err := ca.Certificate("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.Certificate("API.example.com.")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("second Certificate for the same host minted a new leaf")
	}
	for i := range leafCacheSize + 44 {
		if _, err := ca.Certificate(fmt.Sprintf("h%d.example.com", i)); err != nil {
			t.Fatal(err)
		}
		if n := ca.cacheLen(); n > leafCacheSize {
			t.Fatalf("cache holds %d leaves, more than %d", n, leafCacheSize)
		}
	}
	if n := ca.cacheLen(); n != leafCacheSize {
		t.Errorf("cache holds %d leaves, want %d", n, leafCacheSize)
	}
	c, err := ca.Certificate("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Error("least recently used leaf was not evicted")
	}
}

func TestLeafRenewal(t *testing.T) {
	ca, _ := newTestCA(t)
	now := time.Now()
	ca.now = func() time.Time { return now }
	a, err := ca.Certificate("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	now = now.Add(LeafValidity - 2*leafRenewBefore)
	if b, _ := ca.Certificate("api.example.com"); b != a {
		t.Error("leaf renewed while still fresh")
	}
	now = now.Add(leafRenewBefore + time.Minute)
	b, err := ca.Certificate("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if b == a {
		t.Fatal("leaf within an hour of expiry was not renewed")
	}
	if !b.Leaf.NotAfter.After(a.Leaf.NotAfter) {
		t.Errorf("renewed leaf expires %v, not after %v", b.Leaf.NotAfter, a.Leaf.NotAfter)
	}
	// Leaves never outlive the CA, and an expired CA mints nothing.
	now = ca.cert.NotAfter.Add(-LeafValidity / 2)
	c, err := ca.Certificate("late.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Leaf.NotAfter.Equal(ca.cert.NotAfter) {
		t.Errorf("leaf expires %v, after the CA's %v", c.Leaf.NotAfter, ca.cert.NotAfter)
	}
	now = ca.cert.NotAfter.Add(time.Minute)
	if _, err := ca.Certificate("later.example.com"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Certificate with an expired CA: %v, want ErrFailedPrecondition", err)
	}
}

func TestCertificateConcurrent(t *testing.T) {
	ca, _ := newTestCA(t)
	const n = 32
	got := make([]any, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := ca.Certificate("same.example.com")
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		})
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatalf("concurrent calls minted different leaves (%d differs)", i)
		}
	}
}
