package capability

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Keyring is the control plane's set of signing keys, rotatable without
// refusing a single valid request:
//
//  1. Rotate makes a new key and publishes it at once (it is in KeySet, so
//     nodes learn it with their next heartbeat answer) but does not sign
//     with it until ActivationDelay has passed, by which time every live
//     node holds it.
//  2. From then on Signer returns the new key; the previous one signs no
//     more but stays in KeySet for Lifetime+Skew, so capabilities it signed
//     just before still verify until they expire.
//  3. Then it is dropped from KeySet and its private half is erased.
//
// Every change increments the key set's version: receivers install a newer
// version and ignore older ones. The keyring lives in one file (mode 0600),
// written atomically.
//
// The keyring's own clock never goes back (see steadyClock): a wall clock
// set back must not stall a rotation, bring a retired key back to signing,
// or leave no key to sign with because the newest one seems not yet active.
// Capabilities are still minted with the wall clock, which receivers compare
// with theirs.
type Keyring struct {
	path string
	wall func() time.Time

	mu    sync.Mutex
	clock steadyClock
	file  keyringFile
}

// ActivationDelay is how long a new signing key is published before it
// signs: several heartbeat intervals, so every live node has it first.
const ActivationDelay = 10 * time.Second

type keyringFile struct {
	Version uint64       `json:"version"`
	Keys    []keyringKey `json:"keys"`
	// Clock is the latest time of the keyring's clock when the file was
	// written: a restart with the wall clock behind resumes from it.
	Clock time.Time `json:"clock,omitzero"`
}

type keyringKey struct {
	ID string `json:"id"`
	// Seed is the private key's seed (hex); erased once the key is
	// dropped.
	Seed string `json:"seed,omitempty"`
	// Public is the verification key (hex).
	Public string `json:"public"`
	// Created is when the key was made; Active when it starts signing.
	Created time.Time `json:"created"`
	Active  time.Time `json:"active"`
	// Retired is when a newer key took over (zero while it signs or waits).
	Retired time.Time `json:"retired,omitzero"`
	// Dropped is when it left the key set.
	Dropped time.Time `json:"dropped,omitzero"`
}

// KeyInfo describes one key of the ring.
type KeyInfo struct {
	ID      string
	Created time.Time
	// Active is when it signs (or signed) first.
	Active time.Time
	// Retired is when a newer key took over; Dropped when it left the key
	// set. Zero while not yet.
	Retired, Dropped time.Time
	// Signing reports whether it is the key that signs now.
	Signing bool
}

// OpenKeyring reads the keyring at path, creating it on first use. An older
// single-key file (legacySeedPath, the hex seed LoadOrCreateSigner wrote)
// becomes its first key, so capabilities and node key sets stay valid
// across the upgrade.
func OpenKeyring(path, legacySeedPath string) (*Keyring, error) {
	start := time.Now()
	return openKeyring(path, legacySeedPath, time.Now, func() time.Duration { return time.Since(start) })
}

// openKeyring is OpenKeyring with the wall clock and a monotonic clock
// (elapsed time since any fixed origin) given.
func openKeyring(path, legacySeedPath string, wall func() time.Time, elapsed func() time.Duration) (*Keyring, error) {
	k := &Keyring{path: path, wall: wall, clock: steadyClock{wall: wall, elapsed: elapsed}}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if len(b) > 1<<20 {
			return nil, fmt.Errorf("capability: keyring %s is larger than 1 MiB", path)
		}
		if err := json.Unmarshal(b, &k.file); err != nil {
			return nil, fmt.Errorf("capability: keyring %s: %w", path, err)
		}
		if err := k.file.validate(); err != nil {
			return nil, fmt.Errorf("capability: keyring %s: %w", path, err)
		}
		k.clock.start(k.file.latest())
		return k, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("capability: read keyring %s: %w", path, err)
	}
	var seed []byte
	if legacySeedPath != "" {
		if b, err := os.ReadFile(legacySeedPath); err == nil {
			if seed, err = hex.DecodeString(strings.TrimSpace(string(b))); err != nil || len(seed) != ed25519.SeedSize {
				return nil, fmt.Errorf("capability: %s does not hold an Ed25519 seed", legacySeedPath)
			}
		}
	}
	if seed == nil {
		seed = make([]byte, ed25519.SeedSize)
		rand.Read(seed)
	}
	now := k.clock.now()
	k.file = keyringFile{Version: 1, Keys: []keyringKey{newKeyringKey(seed, now, now)}}
	if err := k.save(); err != nil {
		return nil, err
	}
	return k, nil
}

func newKeyringKey(seed []byte, created, active time.Time) keyringKey {
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	return keyringKey{ID: KeyID(pub), Seed: hex.EncodeToString(seed), Public: hex.EncodeToString(pub), Created: created, Active: active}
}

func (f *keyringFile) validate() error {
	if len(f.Keys) == 0 || len(f.Keys) > 64 {
		return fmt.Errorf("%d keys, want 1 to 64", len(f.Keys))
	}
	signing := 0
	for _, k := range f.Keys {
		pub, err := hex.DecodeString(k.Public)
		if err != nil || len(pub) != ed25519.PublicKeySize || k.ID != KeyID(pub) {
			return fmt.Errorf("key %q: bad public key or id", k.ID)
		}
		if k.Dropped.IsZero() {
			seed, err := hex.DecodeString(k.Seed)
			if err != nil || len(seed) != ed25519.SeedSize {
				return fmt.Errorf("key %s: bad seed", k.ID)
			}
			if !ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(pub)) {
				return fmt.Errorf("key %s: seed and public key differ", k.ID)
			}
			signing++
		}
	}
	if signing == 0 {
		return errors.New("no key left to sign with")
	}
	return nil
}

// latest is the latest time the file records: its clock, and every time a
// key was created, retired or dropped at (a key's Active may lie ahead).
func (f *keyringFile) latest() time.Time {
	t := f.Clock
	for _, key := range f.Keys {
		for _, at := range []time.Time{key.Created, key.Retired, key.Dropped} {
			if at.After(t) {
				t = at
			}
		}
	}
	return t
}

// save writes the keyring atomically; the caller holds mu (or owns k).
func (k *Keyring) save() error {
	k.file.Clock = k.clock.last
	b, err := json.MarshalIndent(k.file, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(k.path), ".keyring-")
	if err != nil {
		return fmt.Errorf("capability: write keyring: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err == nil {
		if _, err = tmp.Write(b); err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), k.path)
	}
	if err != nil {
		return fmt.Errorf("capability: write keyring %s: %w", k.path, err)
	}
	return nil
}

// advance retires keys a newer active key took over and drops retired keys
// past their grace, at now; it reports whether anything changed. The caller
// holds mu.
func (k *Keyring) advance(now time.Time) bool {
	changed := false
	signing := k.signingIndex(now)
	for i := range k.file.Keys {
		key := &k.file.Keys[i]
		if i < signing && key.Retired.IsZero() {
			key.Retired = k.file.Keys[signing].Active
			changed = true
		}
		if !key.Retired.IsZero() && key.Dropped.IsZero() && !now.Before(key.Retired.Add(Lifetime+Skew)) {
			key.Dropped, key.Seed = now, ""
			changed = true
		}
	}
	if changed {
		k.file.Version++
	}
	return changed
}

// signingIndex is the index of the newest key active at now (keys are kept
// in creation order).
func (k *Keyring) signingIndex(now time.Time) int {
	idx := 0
	for i, key := range k.file.Keys {
		if key.Dropped.IsZero() && !now.Before(key.Active) {
			idx = i
		}
	}
	return idx
}

// refresh applies the passage of time and persists what changed.
func (k *Keyring) refresh() {
	if k.advance(k.clock.now()) {
		_ = k.save() // the next call retries; memory is current
	}
}

// Signer returns the signer of the key that signs now.
func (k *Keyring) Signer() (*Signer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refresh()
	key := k.file.Keys[k.signingIndex(k.clock.now())]
	seed, err := hex.DecodeString(key.Seed)
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("capability: signing key %s has no private half", key.ID)
	}
	s, err := NewSigner(key.ID, ed25519.NewKeyFromSeed(seed))
	if err != nil {
		return nil, err
	}
	s.now = k.wall
	return s, nil
}

// KeySet returns the verification keys receivers need now: the signing key,
// a published successor, and retired keys within their grace.
func (k *Keyring) KeySet() *KeySet {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refresh()
	ks := &KeySet{Version: k.file.Version, Keys: map[string]ed25519.PublicKey{}}
	for _, key := range k.file.Keys {
		if key.Dropped.IsZero() {
			pub, _ := hex.DecodeString(key.Public)
			ks.Keys[key.ID] = ed25519.PublicKey(pub)
		}
	}
	return ks
}

// Rotate makes a new signing key, published now and signing from now +
// ActivationDelay, and returns it. A rotation while another new key still
// waits to sign replaces nothing: it returns that one.
func (k *Keyring) Rotate() (KeyInfo, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refresh()
	now := k.clock.now()
	last := k.file.Keys[len(k.file.Keys)-1]
	if now.Before(last.Active) {
		return k.info(len(k.file.Keys)-1, now), nil
	}
	live := 0
	for _, key := range k.file.Keys {
		if key.Dropped.IsZero() {
			live++
		}
	}
	if live >= 15 {
		return KeyInfo{}, errors.New("capability: too many keys in their grace period; retry after it")
	}
	seed := make([]byte, ed25519.SeedSize)
	rand.Read(seed)
	k.file.Keys = append(k.file.Keys, newKeyringKey(seed, now, now.Add(ActivationDelay)))
	// Forget keys dropped long ago (their ids only).
	kept := k.file.Keys[:0]
	for _, key := range k.file.Keys {
		if key.Dropped.IsZero() || now.Sub(key.Dropped) < 30*24*time.Hour {
			kept = append(kept, key)
		}
	}
	k.file.Keys = kept
	k.file.Version++
	if err := k.save(); err != nil {
		return KeyInfo{}, err
	}
	return k.info(len(k.file.Keys)-1, now), nil
}

// Keys lists the keyring's keys, oldest first.
func (k *Keyring) Keys() []KeyInfo {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refresh()
	now := k.clock.now()
	out := make([]KeyInfo, len(k.file.Keys))
	for i := range k.file.Keys {
		out[i] = k.info(i, now)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

func (k *Keyring) info(i int, now time.Time) KeyInfo {
	key := k.file.Keys[i]
	return KeyInfo{ID: key.ID, Created: key.Created, Active: key.Active, Retired: key.Retired, Dropped: key.Dropped,
		Signing: i == k.signingIndex(now) && key.Dropped.IsZero()}
}
