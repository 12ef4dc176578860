package capability

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKeyringRotation walks one rotation with an injected clock: the new key
// is published at once but signs only after ActivationDelay; the old one
// keeps verifying its capabilities until Lifetime+Skew after that, then is
// dropped and its private half erased; every change bumps the version.
func TestKeyringRotation(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	origin := now
	k, err := openKeyring(filepath.Join(dir, "keys.json"), "", func() time.Time { return now }, func() time.Duration { return now.Sub(origin) })
	if err != nil {
		t.Fatal(err)
	}
	old, err := k.Signer()
	if err != nil {
		t.Fatal(err)
	}
	v1 := k.KeySet().Version
	oldTok, err := old.Mint(Identity{Sandbox: "sb1", Generation: 1}, OpExec, 0, "")
	if err != nil {
		t.Fatal(err)
	}

	info, err := k.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	ks := k.KeySet()
	if ks.Version <= v1 || len(ks.Keys) != 2 || ks.Keys[info.ID] == nil {
		t.Fatalf("after rotate: key set v%d with %d keys, want a newer version publishing both", ks.Version, len(ks.Keys))
	}
	if s, _ := k.Signer(); s.KeyID() != old.KeyID() {
		t.Errorf("the new key signs before ActivationDelay")
	}
	if again, _ := k.Rotate(); again.ID != info.ID {
		t.Errorf("a second rotation while one waits made another key")
	}

	now = now.Add(ActivationDelay)
	s, _ := k.Signer()
	if s.KeyID() != info.ID {
		t.Fatalf("after ActivationDelay the signer is %s, want the new key %s", s.KeyID(), info.ID)
	}
	ks = k.KeySet()
	if _, err := Verify(oldTok, ks, now); err != nil {
		t.Errorf("a capability of the old key during its grace: %v", err)
	}
	newTok, _ := s.Mint(Identity{Sandbox: "sb1", Generation: 1}, OpExec, 0, "")
	if _, err := Verify(newTok, ks, now); err != nil {
		t.Errorf("a capability of the new key: %v", err)
	}

	now = now.Add(Lifetime + Skew)
	ks = k.KeySet()
	if len(ks.Keys) != 1 || ks.Keys[old.KeyID()] != nil {
		t.Errorf("after the grace the key set holds %d keys (old present: %v), want the new one only", len(ks.Keys), ks.Keys[old.KeyID()] != nil)
	}
	if _, err := Verify(oldTok, ks, now.Add(-time.Minute)); err == nil {
		t.Error("a dropped key still verifies")
	}
	b, _ := os.ReadFile(filepath.Join(dir, "keys.json"))
	if fi, _ := os.Stat(filepath.Join(dir, "keys.json")); fi.Mode().Perm() != 0o600 {
		t.Errorf("keyring mode %v, want 0600", fi.Mode().Perm())
	}
	// The dropped key's seed is gone from the file.
	k2, err := openKeyring(filepath.Join(dir, "keys.json"), "", func() time.Time { return now }, func() time.Duration { return 0 })
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	for _, key := range k2.file.Keys {
		if key.ID == old.KeyID() && key.Seed != "" {
			t.Error("the dropped key's private half is still in the keyring")
		}
	}
	if !strings.Contains(string(b), info.ID) {
		t.Error("the keyring file does not hold the new key")
	}
	infos := k2.Keys()
	if len(infos) != 2 || infos[0].Dropped.IsZero() || !infos[1].Signing {
		t.Errorf("Keys = %+v", infos)
	}
}

// TestKeyringAdoptsLegacyKey: the single signing key of earlier versions
// becomes the keyring's first key, so nothing signed before the upgrade is
// refused.
func TestKeyringAdoptsLegacyKey(t *testing.T) {
	dir := t.TempDir()
	legacy := filepath.Join(dir, "signing.key")
	s, err := LoadOrCreateSigner(legacy)
	if err != nil {
		t.Fatal(err)
	}
	k, err := OpenKeyring(filepath.Join(dir, "keys.json"), legacy)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := k.Signer()
	if got.KeyID() != s.KeyID() {
		t.Errorf("keyring signs with %s, want the legacy key %s", got.KeyID(), s.KeyID())
	}
}

// TestKeyringRefusesBadFiles: a keyring file that is not what it says is
// refused, not half used.
func TestKeyringRefusesBadFiles(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	good := newKeyringKey(seed, time.Unix(1, 0), time.Unix(1, 0))
	other := newKeyringKey(append([]byte{1}, seed[1:]...), time.Unix(1, 0), time.Unix(1, 0))
	for name, body := range map[string]string{
		"garbage":       "{",
		"no keys":       `{"version":1,"keys":[]}`,
		"id mismatch":   `{"version":1,"keys":[{"id":"x","seed":"` + good.Seed + `","public":"` + good.Public + `"}]}`,
		"seed mismatch": `{"version":1,"keys":[{"id":"` + good.ID + `","seed":"` + other.Seed + `","public":"` + good.Public + `"}]}`,
		"bad seed":      `{"version":1,"keys":[{"id":"` + good.ID + `","seed":"zz","public":"` + good.Public + `"}]}`,
		"all dropped":   `{"version":1,"keys":[{"id":"` + good.ID + `","public":"` + good.Public + `","dropped":"2026-01-01T00:00:00Z"}]}`,
	} {
		path := filepath.Join(t.TempDir(), "keys.json")
		os.WriteFile(path, []byte(body), 0o600)
		if _, err := OpenKeyring(path, ""); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// testClocks is a wall clock that a test sets (forward or back) and a
// monotonic clock that only Advance moves.
type testClocks struct {
	wall    time.Time
	elapsed time.Duration
}

func (c *testClocks) Wall() time.Time             { return c.wall }
func (c *testClocks) Elapsed() time.Duration      { return c.elapsed }
func (c *testClocks) Advance(d time.Duration)     { c.wall, c.elapsed = c.wall.Add(d), c.elapsed+d }
func (c *testClocks) SetWallBack(d time.Duration) { c.wall = c.wall.Add(-d) }

func openTestKeyring(t *testing.T, path string, c *testClocks) *Keyring {
	t.Helper()
	k, err := openKeyring(path, "", c.Wall, c.Elapsed)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// rotateFully rotates and waits until the old key is dropped, on the
// keyring's clocks; it returns the new signing key's id.
func rotateFully(t *testing.T, k *Keyring, c *testClocks) string {
	t.Helper()
	info, err := k.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	c.Advance(ActivationDelay + Lifetime + Skew)
	if s, err := k.Signer(); err != nil || s.KeyID() != info.ID {
		t.Fatalf("after a full rotation: signer %v, %v; want %s", s, err, info.ID)
	}
	return info.ID
}

// TestKeyringClockSetBack (catalogue F-8): a wall clock set back by an hour
// must not stall the keyring. The signing key keeps signing (not a dropped
// key with no private half, not a retired one brought back), a rotation
// rotates, and the new key signs after ActivationDelay of real time, not
// after the wall clock has caught up — in one process and after a restart.
func TestKeyringClockSetBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	c := &testClocks{wall: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	k := openTestKeyring(t, path, c)
	signing := rotateFully(t, k, c)

	c.SetWallBack(time.Hour)
	s, err := k.Signer()
	if err != nil {
		t.Fatalf("signer after the clock went back: %v", err)
	}
	if s.KeyID() != signing {
		t.Errorf("after the clock went back the signer is %s, want %s still", s.KeyID(), signing)
	}
	before := k.KeySet()
	info, err := k.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if info.ID == signing {
		t.Fatal("a rotation after the clock went back made no new key")
	}
	if ks := k.KeySet(); ks.Version <= before.Version || ks.Keys[info.ID] == nil {
		t.Errorf("the new key is not published (key set v%d → v%d)", before.Version, ks.Version)
	}
	c.Advance(ActivationDelay)
	if s, _ := k.Signer(); s.KeyID() != info.ID {
		t.Errorf("ActivationDelay after the rotation the signer is %s, want the new key %s", s.KeyID(), info.ID)
	}

	// A restart with the wall clock still an hour behind resumes from the
	// time the file recorded: the new key still signs, the old one's grace
	// runs in real time.
	k2 := openTestKeyring(t, path, c)
	if s, err := k2.Signer(); err != nil || s.KeyID() != info.ID {
		t.Errorf("after a restart with the clock behind: signer %v, %v; want %s", s, err, info.ID)
	}
	c.Advance(Lifetime + Skew)
	if ks := k2.KeySet(); len(ks.Keys) != 1 || ks.Keys[info.ID] == nil {
		t.Errorf("Lifetime+Skew after the activation the key set holds %d keys, want the new one only", len(ks.Keys))
	}
}

// TestKeyringClockSetBackWhileWaiting: a clock set back while a new key
// waits to sign neither makes it wait longer than ActivationDelay of real
// time nor lets a second rotation replace it.
func TestKeyringClockSetBackWhileWaiting(t *testing.T) {
	c := &testClocks{wall: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	k := openTestKeyring(t, filepath.Join(t.TempDir(), "keys.json"), c)
	old, _ := k.Signer()
	info, err := k.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	c.SetWallBack(time.Hour)
	if again, _ := k.Rotate(); again.ID != info.ID {
		t.Error("a rotation while one waits made another key")
	}
	c.Advance(ActivationDelay - time.Second)
	if s, _ := k.Signer(); s.KeyID() != old.KeyID() {
		t.Error("the new key signs before ActivationDelay")
	}
	c.Advance(time.Second)
	if s, _ := k.Signer(); s.KeyID() != info.ID {
		t.Errorf("ActivationDelay of real time after the rotation the signer is %s, want %s", s.KeyID(), info.ID)
	}
}

// TestSignerMintsWithTheWallClock: capabilities carry the wall clock's time
// (receivers compare it with theirs), not the keyring's steady time.
func TestSignerMintsWithTheWallClock(t *testing.T) {
	c := &testClocks{wall: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	k := openTestKeyring(t, filepath.Join(t.TempDir(), "keys.json"), c)
	c.SetWallBack(time.Hour)
	s, _ := k.Signer()
	tok, err := s.Mint(Identity{Sandbox: "sb1", Generation: 1}, OpExec, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Verify(tok, k.KeySet(), c.Wall())
	if err != nil {
		t.Fatal(err)
	}
	if !got.IssuedAt.Equal(c.Wall().Truncate(time.Second)) {
		t.Errorf("issued at %v, want the wall clock's %v", got.IssuedAt, c.Wall())
	}
}
