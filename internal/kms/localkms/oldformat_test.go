package localkms

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOldFormatOpens: a keys.json and a wrapped key written by the code
// before internal/seal (testdata/oldformat, made by that code) unwrap.
func TestOldFormatOpens(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/oldformat/keys.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, keyFileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	line, err := os.ReadFile("testdata/oldformat/wrapped")
	if err != nil {
		t.Fatal(err)
	}
	id, wrappedHex, _ := strings.Cut(strings.TrimSpace(string(line)), " ")
	wrapped, err := hex.DecodeString(wrappedHex)
	if err != nil {
		t.Fatal(err)
	}
	k, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := k.UnwrapKey(context.Background(), id, wrapped, []byte("aad-old"))
	if want := []byte("data key of the old format......"); err != nil || !bytes.Equal(got, want) {
		t.Errorf("UnwrapKey of the old wrapped key = %q, %v; want %q", got, err, want)
	}
	if _, err := k.UnwrapKey(context.Background(), id, wrapped, []byte("other aad")); err == nil {
		t.Error("the old wrapped key opened with another aad")
	}
}
