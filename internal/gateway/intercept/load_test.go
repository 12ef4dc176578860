package intercept

import (
	"crypto/x509"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandboxca"
)

func TestGenerateAndLoadCA(t *testing.T) {
	certPEM, keyPEM, err := sandboxca.Generate("sandbox abc")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Certificate("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		t.Fatal("generated certificate does not parse")
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "api.example.com"}); err != nil {
		t.Fatalf("a leaf of the loaded CA does not verify against the generated certificate: %v", err)
	}
	// Another CA's key with this certificate is refused.
	_, otherKey, err := sandboxca.Generate("other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(certPEM, otherKey); !errdefs.IsInvalidArgument(err) {
		t.Errorf("LoadCA with a foreign key = %v, want invalid argument", err)
	}
	for _, bad := range [][2][]byte{{nil, keyPEM}, {certPEM, nil}, {keyPEM, certPEM}, {[]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), keyPEM}} {
		if _, err := LoadCA(bad[0], bad[1]); err == nil {
			t.Errorf("LoadCA(%.30q, %.30q) accepted", bad[0], bad[1])
		}
	}
}

func FuzzLoadCA(f *testing.F) {
	c, k, err := sandboxca.Generate("seed")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(c, k)
	f.Add([]byte("junk"), []byte("junk"))
	f.Fuzz(func(t *testing.T, certPEM, keyPEM []byte) {
		ca, err := LoadCA(certPEM, keyPEM)
		if err == nil && ca == nil {
			t.Fatal("nil CA without an error")
		}
	})
}
