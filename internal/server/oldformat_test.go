package server

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOldFormatOpens: a CA sealing key file, a sealed CA key and a sealed
// node token written by the code before internal/seal (testdata/oldformat,
// made by that code) open, and the E2B token key derived from that key is
// the one the old code derived, so tokens survive an upgrade.
func TestOldFormatOpens(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "ca-seal.key")
	copyPrivate(t, "testdata/oldformat/ca-seal.key", keyPath)
	c, err := OpenCASealer(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := hex.DecodeString(readTrimmed(t, "testdata/oldformat/ca-key.sealed"))
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("-----BEGIN EC PRIVATE KEY-----\nold format\n-----END EC PRIVATE KEY-----\n")
	if got, err := c.open("sb-old", sealed); err != nil || !bytes.Equal(got, want) {
		t.Errorf("old sealed CA key: open = %q, %v; want %q", got, err, want)
	}
	if got, err := c.openNodeToken("node-old", readTrimmed(t, "testdata/oldformat/node-token.sealed")); err != nil || got != "token-old" {
		t.Errorf("old sealed node token: open = %q, %v; want token-old", got, err)
	}
	s := &Server{cfg: Config{CASealer: c}}
	if got, want := hex.EncodeToString(s.e2bTokenKey()), readTrimmed(t, "testdata/oldformat/e2b-token-key"); got != want {
		t.Errorf("E2B token key = %s, the old code derived %s", got, want)
	}
}

// copyPrivate copies a key file from testdata (where git keeps no mode) to
// dst with mode 0600.
func copyPrivate(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}
