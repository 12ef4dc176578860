package seal

import (
	"bytes"
	"testing"
)

// FuzzParseKey: arbitrary key file bytes never panic, and only exactly 64
// hex digits (plus one newline) parse.
func FuzzParseKey(f *testing.F) {
	f.Add([]byte("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n"))
	f.Add([]byte("zz"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		key, err := parseKey(data)
		if err != nil {
			return
		}
		if len(key) != KeyLen || len(bytes.TrimSuffix(data, []byte("\n"))) != 2*KeyLen {
			t.Fatalf("parsed %d-byte key from %q", len(key), data)
		}
	})
}
