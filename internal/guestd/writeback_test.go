package guestd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWritebackAheadStartsEveryChunk: the writer that replaces a file asks
// for the writeback of each writebackChunk as it is written, leaves only the
// tail to the rename, and writes every byte as given.
func TestWritebackAheadStartsEveryChunk(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "upload"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &writebackAhead{f: f, fd: int(f.Fd())}
	data := bytes.Repeat([]byte("0123456789abcdef"), (2*writebackChunk+4096)/16)
	for rest := data; len(rest) > 0; {
		n := min(256<<10, len(rest))
		if k, err := w.Write(rest[:n]); k != n || err != nil {
			t.Fatalf("Write = %d, %v", k, err)
		}
		rest = rest[n:]
	}
	if w.off || w.started != 2*writebackChunk {
		t.Errorf("after %d bytes: writeback started up to %d (off %v); want up to %d", len(data), w.started, w.off, 2*writebackChunk)
	}
	if got, err := os.ReadFile(f.Name()); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the file has %d bytes (%v), not the %d written", len(got), err, len(data))
	}
}

// TestWritebackAheadErrors: a file the kernel cannot start writing back
// (a pipe: ESPIPE) is written without it; any other failure of the request
// (here no descriptor: EBADF) fails the write.
func TestWritebackAheadErrors(t *testing.T) {
	r, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer pw.Close()
	go func() { _, _ = bytes.NewBuffer(nil).ReadFrom(r) }()
	w := &writebackAhead{f: pw, fd: int(pw.Fd())}
	chunk := make([]byte, writebackChunk)
	for i := range 2 {
		if _, err := w.Write(chunk); err != nil {
			t.Fatalf("write %d into a pipe: %v; want no error, without writeback", i, err)
		}
	}
	if !w.off {
		t.Error("a pipe: writeback still on after ESPIPE")
	}

	f, err := os.Create(filepath.Join(t.TempDir(), "upload"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w = &writebackAhead{f: f, fd: -1}
	_, err = w.Write(chunk)
	if err == nil || !strings.Contains(err.Error(), "start writeback of bytes 0-8388608") {
		t.Errorf("writeback refused with EBADF: Write error %v; want it reported", err)
	}
}
