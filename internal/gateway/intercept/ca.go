package intercept

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandboxca"
)

// Lifetimes and bounds of the certificates a CA issues.
const (
	// CAValidity is how long a new CA is valid.
	CAValidity = sandboxca.Validity
	// LeafValidity is how long a leaf certificate is valid.
	LeafValidity = 24 * time.Hour
	// clockSkew backdates every certificate, so a guest whose clock runs a
	// little behind the host's still accepts it.
	clockSkew = sandboxca.ClockSkew
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
	cert, key, err := sandboxca.New(commonName)
	if err != nil {
		return nil, err
	}
	return newCA(cert, key), nil
}

// LoadCA loads a CA made by sandboxca.Generate. It checks that the
// certificate is a CA certificate, that the key is its key, and that it has
// not expired.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, key, err := sandboxca.Parse(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	return newCA(cert, key), nil
}

func newCA(cert *x509.Certificate, key *ecdsa.PrivateKey) *CA {
	return &CA{
		cert:    cert,
		certPEM: sandboxca.CertPEM(cert),
		key:     key,
		now:     time.Now,
		lru:     list.New(),
		leaves:  make(map[string]*list.Element),
	}
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
	serial, err := sandboxca.RandomSerial()
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
