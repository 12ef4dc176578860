package sandboxca

import (
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestGenerateAndParse(t *testing.T) {
	certPEM, keyPEM, err := Generate("sandbox abc")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := Parse(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "sandbox abc" || !cert.IsCA || !cert.MaxPathLenZero || key == nil {
		t.Errorf("parsed CA: CN %q, IsCA %v, MaxPathLenZero %v", cert.Subject.CommonName, cert.IsCA, cert.MaxPathLenZero)
	}
	if d := cert.NotAfter.Sub(cert.NotBefore); d != Validity+ClockSkew {
		t.Errorf("validity %v, want %v", d, Validity+ClockSkew)
	}
	// Another CA's key with this certificate is refused.
	_, otherKey, err := Generate("other")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Parse(certPEM, otherKey); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Parse with a foreign key = %v, want invalid argument", err)
	}
	for _, bad := range [][2][]byte{{nil, keyPEM}, {certPEM, nil}, {keyPEM, certPEM}, {[]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), keyPEM}} {
		if _, _, err := Parse(bad[0], bad[1]); err == nil {
			t.Errorf("Parse(%.30q, %.30q) accepted", bad[0], bad[1])
		}
	}
	if _, _, err := Generate(""); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Generate with an empty name = %v, want invalid argument", err)
	}
}
