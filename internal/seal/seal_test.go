package seal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

func TestSealOpen(t *testing.T) {
	s, err := New(bytes.Repeat([]byte{1}, KeyLen))
	if err != nil {
		t.Fatal(err)
	}
	header := []byte("HDR1")
	plain := []byte("the secret")
	sealed := s.Seal(bytes.Clone(header), plain, header)
	if !bytes.HasPrefix(sealed, header) || len(sealed) != len(header)+len(plain)+s.Overhead() {
		t.Fatalf("sealed = %x: want the header then %d bytes", sealed, len(plain)+s.Overhead())
	}
	if bytes.Contains(sealed, plain) {
		t.Fatal("sealed data holds the plaintext")
	}
	body := sealed[len(header):]
	if got, err := s.Open(body, header); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q, %v; want %q", got, err, plain)
	}
	if again := s.Seal(nil, plain, header); bytes.Equal(again, body) {
		t.Error("two seals of one message are equal: the nonce is not fresh")
	}
	other, _ := New(bytes.Repeat([]byte{2}, KeyLen))
	for name, tc := range map[string]struct {
		s         *Sealer
		data, aad []byte
	}{
		"other aad":   {s, body, []byte("HDR2")},
		"other key":   {other, body, header},
		"truncated":   {s, body[:s.Overhead()-1], header},
		"empty":       {s, nil, header},
		"bit flipped": {s, append([]byte{body[0] ^ 1}, body[1:]...), header},
	} {
		if _, err := tc.s.Open(tc.data, tc.aad); !errors.Is(err, ErrOpen) || !errdefs.IsFailedPrecondition(err) {
			t.Errorf("%s: Open err = %v, want ErrOpen (FailedPrecondition)", name, err)
		}
	}
}

func TestNewRefusesKeyLength(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33} {
		if _, err := New(make([]byte, n)); !errdefs.IsInvalidArgument(err) {
			t.Errorf("New with a %d-byte key: err = %v, want ErrInvalidArgument", n, err)
		}
	}
}
