package envelope

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/kms"
)

// tamperFixture is an artifact of four full chunks and a short final one.
type tamperFixture struct {
	k         kms.KMS
	keyID     string
	aad       []byte
	plain     []byte
	sealed    []byte
	headerLen int
}

const tChunk = MinChunkSize

func newTamperFixture(t *testing.T) *tamperFixture {
	k, id := newLocalKMS(t)
	f := &tamperFixture{k: k, keyID: id, aad: artifactAAD("memory"), plain: pattern(4*tChunk + 10)}
	f.sealed = sealArtifact(t, k, id, f.aad, f.plain, tChunk)
	f.headerLen = len(f.sealed) - (4*(tChunk+TagSize) + 10 + TagSize)
	return f
}

// chunk returns the sealed bytes of chunk i.
func (f *tamperFixture) chunk(i int) []byte {
	start := f.headerLen + i*(tChunk+TagSize)
	return f.sealed[start:min(start+tChunk+TagSize, len(f.sealed))]
}

func (f *tamperFixture) header() []byte { return f.sealed[:f.headerLen] }

// chunks returns the header followed by the given chunks.
func (f *tamperFixture) assemble(idx ...int) []byte {
	out := slices.Clone(f.header())
	for _, i := range idx {
		out = append(out, f.chunk(i)...)
	}
	return out
}

// wantRejected opens sealed and fails unless it errors with class
// ErrCorrupt (or want, when given) after yielding at most the plaintext of
// the first okChunks chunks, which must be authentic.
func (f *tamperFixture) wantRejected(t *testing.T, what string, sealed []byte, okChunks int, want error) {
	t.Helper()
	if want == nil {
		want = ErrCorrupt
	}
	got, err := open(f.k, f.aad, sealed)
	if err == nil {
		t.Fatalf("%s: opened without error (%d bytes)", what, len(got))
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: err = %v, want %v", what, err, want)
	}
	if len(got) > okChunks*tChunk || !bytes.Equal(got, f.plain[:len(got)]) {
		t.Fatalf("%s: yielded %d bytes before failing, want at most the %d authentic ones", what, len(got), okChunks*tChunk)
	}
}

func TestTamperHeader(t *testing.T) {
	f := newTamperFixture(t)
	for i := range f.headerLen {
		for _, bit := range []byte{0x01, 0x80} {
			b := slices.Clone(f.sealed)
			b[i] ^= bit
			got, err := open(f.k, f.aad, b)
			if err == nil || len(got) != 0 {
				t.Fatalf("header byte %d ^ %#x: got %d bytes, err %v; want nothing and an error", i, bit, len(got), err)
			}
			// A flipped version byte is "unsupported", a flipped key id may
			// name no key; everything else must be reported as corruption.
			versionByte := i == len(magic)
			keyIDBytes := i >= fixedHeaderLen+2 && i < fixedHeaderLen+2+len(f.keyID)
			if !versionByte && !keyIDBytes && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("header byte %d ^ %#x: err = %v, want ErrCorrupt", i, bit, err)
			}
			if !errdefs.IsFailedPrecondition(err) && !errdefs.IsNotFound(err) {
				t.Fatalf("header byte %d ^ %#x: err = %v has no useful class", i, bit, err)
			}
		}
	}
}

func TestTamperChunks(t *testing.T) {
	f := newTamperFixture(t)
	for c := range 5 {
		start := f.headerLen + c*(tChunk+TagSize)
		end := min(start+tChunk+TagSize, len(f.sealed))
		for name, off := range map[string]int{"first byte": start, "middle": (start + end) / 2, "tag": end - 1, "tag start": end - TagSize} {
			b := slices.Clone(f.sealed)
			b[off] ^= 0x10
			f.wantRejected(t, fmt.Sprintf("chunk %d %s", c, name), b, c, nil)
		}
	}
}

func TestTruncation(t *testing.T) {
	f := newTamperFixture(t)
	boundaries := map[int]bool{}
	for c := range 5 {
		boundaries[f.headerLen+c*(tChunk+TagSize)] = true
	}
	for cut := range len(f.sealed) {
		b := f.sealed[:cut]
		okChunks := 0
		if cut > f.headerLen {
			okChunks = (cut - f.headerLen) / (tChunk + TagSize)
		}
		var want error = ErrCorrupt
		if boundaries[cut] || cut < f.headerLen {
			want = ErrTruncated
		}
		f.wantRejected(t, fmt.Sprintf("cut at %d", cut), b, okChunks, want)
	}
	// Dropping the final chunk is truncation at a boundary, said plainly.
	_, err := open(f.k, f.aad, f.assemble(0, 1, 2, 3))
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "not the final one") {
		t.Errorf("without the final chunk: %v", err)
	}
}

func TestReorderDuplicateAppend(t *testing.T) {
	f := newTamperFixture(t)
	for _, tc := range []struct {
		name     string
		sealed   []byte
		okChunks int
	}{
		{"swap 0 and 1", f.assemble(1, 0, 2, 3, 4), 0},
		{"swap 2 and 3", f.assemble(0, 1, 3, 2, 4), 2},
		{"duplicate 1", f.assemble(0, 1, 1, 2, 3, 4), 2},
		{"drop 2", f.assemble(0, 1, 3, 4), 2},
		{"final chunk twice", f.assemble(0, 1, 2, 3, 4, 4), 4},
		{"full chunk appended", append(slices.Clone(f.sealed), f.chunk(0)...), 4},
		{"one byte appended", append(slices.Clone(f.sealed), 0), 4},
	} {
		f.wantRejected(t, tc.name, tc.sealed, tc.okChunks, nil)
	}
	// An artifact whose final chunk is full: appending after it is caught
	// by the look-ahead, not by a short read.
	full := sealArtifact(t, f.k, f.keyID, f.aad, pattern(2*tChunk), tChunk)
	_, err := open(f.k, f.aad, append(full, 1, 2, 3))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "after the final chunk") {
		t.Errorf("data after a full final chunk: %v", err)
	}
}

func TestSplicingAndWrongName(t *testing.T) {
	f := newTamperFixture(t)
	otherAAD := artifactAAD("disk")
	other := sealArtifact(t, f.k, f.keyID, otherAAD, f.plain, tChunk)
	otherHeaderLen := len(other) - (len(f.sealed) - f.headerLen)

	// The right bytes under the wrong name.
	_, err := open(f.k, otherAAD, f.sealed)
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, kms.ErrInvalidWrappedKey) {
		t.Errorf("artifact opened under another name: %v", err)
	}
	_, err = open(f.k, nil, f.sealed)
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("artifact opened without its aad: %v", err)
	}
	// Another artifact's chunks behind this header, and one chunk swapped in.
	spliced := append(slices.Clone(f.header()), other[otherHeaderLen:]...)
	f.wantRejected(t, "other artifact's chunks", spliced, 0, nil)
	mixed := slices.Clone(f.sealed)
	copy(mixed[f.headerLen+2*(tChunk+TagSize):], other[otherHeaderLen+2*(tChunk+TagSize):][:tChunk+TagSize])
	f.wantRejected(t, "one chunk from another artifact", mixed, 2, nil)
}

func TestRevokedKey(t *testing.T) {
	f := newTamperFixture(t)
	k, id := newLocalKMS(t)
	sealed := sealArtifact(t, k, id, f.aad, f.plain, tChunk)
	if err := k.RevokeKey(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	_, err := open(k, f.aad, sealed)
	var re *kms.KeyRevokedError
	if !errors.As(err, &re) || re.KeyID != id || !errdefs.IsFailedPrecondition(err) {
		t.Fatalf("open after revoke: %v, want KeyRevokedError", err)
	}
	if want := "tenant key " + id + " was revoked: the data encrypted with it cannot be decrypted"; !strings.Contains(err.Error(), want) {
		t.Errorf("message %q lacks %q", err, want)
	}
}
