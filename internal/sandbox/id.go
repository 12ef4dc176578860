package sandbox

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"strconv"
	"strings"
)

// Identifier shapes. Sandbox ids are lowercase alphanumerics, like E2B's, so
// they can appear in host names and in E2B clients unchanged; tenant, key,
// activation and snapshot ids carry a prefix so that a log line says what
// kind of id it holds.
//
// New sandbox and snapshot ids have 24 random characters: 124 bits, past
// the 122 a guessed id must be unable to reach (catalogue G-3; ids are not
// secrets — every route checks the caller's tenant — but they must not be
// guessable either). Ids made before had 20 (sandboxes, about 103 bits) and
// 16 (snapshots, about 83 bits); they stay valid. Tenant, key and activation
// ids keep 16: they name no tenant resource (an API key's secret is its
// 256-bit second half).
const (
	sandboxIDLen       = 24
	legacySandboxIDLen = 20
	tenantPrefix       = "t-"
	keyPrefix          = "k-"
	// snapshotPrefix starts every snapshot id.
	snapshotPrefix = "sn-"
	snapshotIDLen  = 24
	prefixedIDLen  = 16
	execSuffixLen  = 8
	alphabet       = "abcdefghijklmnopqrstuvwxyz0123456789"
)

// randomString returns n characters drawn uniformly from alphabet using
// crypto/rand. Bytes at or above 252 (the largest multiple of 36 that fits a
// byte) are rejected so that every character is equally likely.
func randomString(n int) string {
	const limit = 256 - 256%len(alphabet)
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/4+4)
	for len(out) < n {
		// crypto/rand.Read never returns an error on Linux (Go 1.24+: it
		// crashes the program instead of returning a weak value).
		rand.Read(buf)
		for _, b := range buf {
			if int(b) < limit && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out)
}

// NewID returns a fresh sandbox id: 24 characters of [a-z0-9].
func NewID() string { return randomString(sandboxIDLen) }

// DerivedID returns the sandbox id that parts name, always the same for the
// same parts: the id of a create carrying an Idempotency-Key is derived from
// the tenant and the key, so a retry after the server died mid-create finds
// the sandbox the first attempt recorded instead of making a second one. It
// has NewID's shape; the parts are hashed (SHA-256, then every character
// drawn without bias from the hash stream).
func DerivedID(parts ...string) string {
	h := sha256.New()
	h.Write([]byte("space sandbox id v1"))
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	seed := h.Sum(nil)
	const limit = 256 - 256%len(alphabet)
	out := make([]byte, 0, sandboxIDLen)
	for block := uint64(0); len(out) < sandboxIDLen; block++ {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], block)
		sum := sha256.Sum256(append(append([]byte{}, seed...), n[:]...))
		for _, b := range sum {
			if int(b) < limit && len(out) < sandboxIDLen {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out)
}

// NewTenantID returns a fresh tenant id, "t-" and 16 characters of [a-z0-9].
func NewTenantID() string { return tenantPrefix + randomString(prefixedIDLen) }

// NewKeyID returns a fresh API key id, "k-" and 16 characters of [a-z0-9].
func NewKeyID() string { return keyPrefix + randomString(prefixedIDLen) }

// NewActivationID returns a fresh activation id: one start attempt of an
// execution (ARCHITECTURE.md §3).
func NewActivationID() string { return "a-" + randomString(prefixedIDLen) }

// NewExecID returns a fresh execution id for generation gen of sandbox id:
// "<id>-g<gen>-<8 random>". It is unique even when a generation is retried.
func NewExecID(id string, gen uint64) string {
	return id + "-g" + strconv.FormatUint(gen, 10) + "-" + randomString(execSuffixLen)
}

// NewSnapshotID returns a fresh snapshot id, "sn-" and 24 characters of
// [a-z0-9].
func NewSnapshotID() string { return snapshotPrefix + randomString(snapshotIDLen) }

// LifecycleSnapshotID is the id of the snapshot an operation (op: "stop",
// "hibernate", "fork") takes of generation gen of sandbox id. It is derived,
// not random, so an operation re-driven after a crash finds the snapshot its
// first attempt took instead of taking another.
func LifecycleSnapshotID(id, op string, gen uint64) string {
	return snapshotPrefix + id + "-" + op + "-g" + strconv.FormatUint(gen, 10)
}

// ValidSnapshotID reports whether s has the shape of a snapshot id (either
// form above).
func ValidSnapshotID(s string) bool {
	rest, ok := strings.CutPrefix(s, snapshotPrefix)
	if !ok || len(rest) == 0 || len(rest) > 60 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// ValidID reports whether s has the shape of a sandbox id (new, or made
// before ids grew).
func ValidID(s string) bool {
	return (len(s) == sandboxIDLen || len(s) == legacySandboxIDLen) && inAlphabet(s)
}

// ValidTenantID reports whether s has the shape of a tenant id.
func ValidTenantID(s string) bool { return validPrefixed(s, tenantPrefix) }

// ValidKeyID reports whether s has the shape of an API key id.
func ValidKeyID(s string) bool { return validPrefixed(s, keyPrefix) }

// ValidExecID reports whether s has the shape NewExecID produces.
func ValidExecID(s string) bool {
	id, rest, ok := strings.Cut(s, "-g")
	if !ok || !ValidID(id) {
		return false
	}
	gen, suffix, ok := strings.Cut(rest, "-")
	if !ok || len(suffix) != execSuffixLen || !inAlphabet(suffix) {
		return false
	}
	n, err := strconv.ParseUint(gen, 10, 64)
	return err == nil && n > 0 && strconv.FormatUint(n, 10) == gen
}

func validPrefixed(s, prefix string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	return ok && len(rest) == prefixedIDLen && inAlphabet(rest)
}

func inAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
