// Package sandboxca makes and parses a sandbox's interception CA
// (ARCHITECTURE.md §7): a self-signed ECDSA P-256 certificate that may sign
// leaf certificates only, and its key, both in PEM. The control plane makes
// one per sandbox and keeps the key sealed; the node's gateway
// (internal/gateway/intercept) loads it and mints leaves with it. This
// package is the format the two share, so that neither imports the other.
package sandboxca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

const (
	// Validity is how long a new CA is valid.
	Validity = 365 * 24 * time.Hour
	// ClockSkew backdates every certificate, so a guest whose clock runs a
	// little behind the host's still accepts it.
	ClockSkew = 5 * time.Minute
)

// New generates a CA whose subject common name is commonName, valid for
// Validity from ClockSkew ago, that may sign leaf certificates only
// (MaxPathLen 0).
func New(commonName string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	if commonName == "" {
		return nil, nil, fmt.Errorf("new interception CA: empty common name: %w", errdefs.ErrInvalidArgument)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("new interception CA %q: generate key: %w", commonName, err)
	}
	serial, err := RandomSerial()
	if err != nil {
		return nil, nil, fmt.Errorf("new interception CA %q: %w", commonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"SPACE sandbox gateway"}},
		NotBefore:             now.Add(-ClockSkew),
		NotAfter:              now.Add(Validity),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("new interception CA %q: sign: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("new interception CA %q: parse: %w", commonName, err)
	}
	return cert, key, nil
}

// Generate makes a new CA (see New) and returns its certificate and private
// key in PEM form (the key as "EC PRIVATE KEY"), for the control plane to
// keep sealed and hand to the node that runs the sandbox.
func Generate(commonName string) (certPEM, keyPEM []byte, err error) {
	cert, key, err := New(commonName)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("new interception CA %q: marshal key: %w", commonName, err)
	}
	return CertPEM(cert), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// CertPEM encodes cert as a PEM "CERTIFICATE" block.
func CertPEM(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// Parse parses a CA made by Generate. It checks that the certificate is a
// CA certificate, that the key is its key, and that it has not expired.
// Errors are ErrInvalidArgument, or ErrFailedPrecondition for an expired CA.
func Parse(certPEM, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("load interception CA: no PEM certificate: %w", errdefs.ErrInvalidArgument)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("load interception CA: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "EC PRIVATE KEY" {
		return nil, nil, fmt.Errorf("load interception CA: no PEM EC private key: %w", errdefs.ErrInvalidArgument)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("load interception CA: key: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil, fmt.Errorf("load interception CA: the key is not the certificate's: %w", errdefs.ErrInvalidArgument)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, nil, fmt.Errorf("load interception CA: the certificate is not a CA: %w", errdefs.ErrInvalidArgument)
	}
	if time.Now().After(cert.NotAfter) {
		return nil, nil, fmt.Errorf("load interception CA: expired at %s: %w", cert.NotAfter.Format(time.RFC3339), errdefs.ErrFailedPrecondition)
	}
	return cert, key, nil
}

// RandomSerial returns a random positive 128-bit serial number.
func RandomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}
