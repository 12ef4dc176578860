package intercept

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
)

// Lifetimes and bounds of the certificates a CA issues.
const (
	// CAValidity is how long a new CA is valid.
	CAValidity = 365 * 24 * time.Hour
	// LeafValidity is how long a leaf certificate is valid.
	LeafValidity = 24 * time.Hour
	// clockSkew backdates every certificate, so a guest whose clock runs a
	// little behind the host's still accepts it.
	clockSkew = 5 * time.Minute
	// leafRenewBefore is how close to its expiry a cached leaf is replaced.
	leafRenewBefore = time.Hour
	// leafCacheSize bounds the leaves a CA keeps; the least recently used
	// is dropped first.
	leafCacheSize = 256
)

// CA is one sandbox's interception certificate authority: a self-signed
// ECDSA P-256 certificate that the guest trusts, and the leaves it mints for
// the hosts the gateway intercepts. The private key is generated in memory
// and never leaves the process: no method returns it, and there is no way
// to load or save one, so a CA lives exactly as long as its gateway.
//
// A CA is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	now     func() time.Time // time.Now; replaced by tests

	group singleflight.Group // one mint per host at a time
	mu    sync.Mutex         // guards leaves and lru
	lru   *list.List         // of *leafEntry, most recently used first
	// leaves indexes lru by normalized host.
	leaves map[string]*list.Element
}

type leafEntry struct {
	host string
	cert *tls.Certificate
}

// NewCA generates a CA whose subject common name is commonName, valid for
// CAValidity from a few minutes ago, that may sign leaf certificates only
// (MaxPathLen 0).
func NewCA(commonName string) (*CA, error) {
	ca, _, err := newCA(commonName)
	return ca, err
}

// GenerateCA makes a new CA and returns its certificate and private key in
// PEM form (the key as "EC PRIVATE KEY"), for the control plane to keep
// sealed and hand to the node that runs the sandbox.
func GenerateCA(commonName string) (certPEM, keyPEM []byte, err error) {
	ca, key, err := newCA(commonName)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("new interception CA %q: marshal key: %w", commonName, err)
	}
	return ca.CertPEM(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// LoadCA loads a CA made by GenerateCA. It checks that the certificate is a
// CA certificate, that the key is its key, and that it has not expired.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("load interception CA: no PEM certificate: %w", errdefs.ErrInvalidArgument)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load interception CA: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("load interception CA: no PEM EC private key: %w", errdefs.ErrInvalidArgument)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("load interception CA: key: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("load interception CA: the key is not the certificate's: %w", errdefs.ErrInvalidArgument)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("load interception CA: the certificate is not a CA: %w", errdefs.ErrInvalidArgument)
	}
	if time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("load interception CA: expired at %s: %w", cert.NotAfter.Format(time.RFC3339), errdefs.ErrFailedPrecondition)
	}
	return &CA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		key:     key,
		now:     time.Now,
		lru:     list.New(),
		leaves:  make(map[string]*list.Element),
	}, nil
}

func newCA(commonName string) (*CA, *ecdsa.PrivateKey, error) {
	if commonName == "" {
		return nil, nil, fmt.Errorf("new interception CA: empty common name: %w", errdefs.ErrInvalidArgument)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("new interception CA %q: generate key: %w", commonName, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, fmt.Errorf("new interception CA %q: %w", commonName, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"SPACE sandbox gateway"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CAValidity),
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
	return &CA{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
		now:     time.Now,
		lru:     list.New(),
		leaves:  make(map[string]*list.Element),
	}, key, nil
}

// CertPEM returns the CA certificate in PEM form: what the guest installs
// into its trust store. The caller may modify the returned slice.
func (ca *CA) CertPEM() []byte {
	return append([]byte(nil), ca.certPEM...)
}

// Certificate returns a leaf certificate for host, a DNS name or an IP
// address literal (case and one trailing dot ignored), whose only subject
// alternative name is host. Leaves are valid for LeafValidity (never past
// the CA's own expiry) and cached; a cached leaf is reused until it is
// within an hour of expiring. Concurrent calls for the same host mint once.
//
// Errors: ErrInvalidArgument for a malformed host, ErrFailedPrecondition
// when the CA itself has expired.
func (ca *CA) Certificate(host string) (*tls.Certificate, error) {
	name, err := credentials.NormalizeHost(host)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate: %w", err)
	}
	if c := ca.cached(name); c != nil {
		return c, nil
	}
	v, err, _ := ca.group.Do(name, func() (any, error) {
		if c := ca.cached(name); c != nil {
			return c, nil
		}
		c, err := ca.mint(name)
		if err != nil {
			return nil, err
		}
		ca.store(name, c)
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*tls.Certificate), nil
}

// cached returns the fresh cached leaf for name, or nil.
func (ca *CA) cached(name string) *tls.Certificate {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	e, ok := ca.leaves[name]
	if !ok {
		return nil
	}
	le := e.Value.(*leafEntry)
	if ca.now().Add(leafRenewBefore).After(le.cert.Leaf.NotAfter) {
		ca.lru.Remove(e)
		delete(ca.leaves, name)
		return nil
	}
	ca.lru.MoveToFront(e)
	return le.cert
}

// store caches c for name, dropping the least recently used leaves past
// leafCacheSize.
func (ca *CA) store(name string, c *tls.Certificate) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if e, ok := ca.leaves[name]; ok {
		ca.lru.Remove(e)
	}
	ca.leaves[name] = ca.lru.PushFront(&leafEntry{host: name, cert: c})
	for ca.lru.Len() > leafCacheSize {
		last := ca.lru.Back()
		ca.lru.Remove(last)
		delete(ca.leaves, last.Value.(*leafEntry).host)
	}
}

// cacheLen reports how many leaves are cached.
func (ca *CA) cacheLen() int {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	return ca.lru.Len()
}

// mint issues a new leaf for the normalized host name.
func (ca *CA) mint(name string) (*tls.Certificate, error) {
	now := ca.now()
	notAfter := now.Add(LeafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	if !notAfter.After(now.Add(leafRenewBefore)) {
		return nil, fmt.Errorf("leaf certificate for %s: interception CA expired at %s; restart the sandbox's gateway: %w",
			name, ca.cert.NotAfter.Format(time.RFC3339), errdefs.ErrFailedPrecondition)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: generate key: %w", name, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: sign: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: parse: %w", name, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// randomSerial returns a random positive 128-bit serial number.
func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return serial.Add(serial, big.NewInt(1)), nil
}
