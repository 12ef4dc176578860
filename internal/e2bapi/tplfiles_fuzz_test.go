package e2bapi

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/spacesandbox/space/internal/template"
)

// FuzzCheckArchive: checkArchive never panics on an upload's bytes, and
// an upload it accepts extracts (template.Extract) without writing
// outside its directory.
func FuzzCheckArchive(f *testing.F) {
	f.Add(tarOfF(tar.Header{Name: "app/a", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}))
	f.Add(tarOfF(tar.Header{Name: "app/l", Typeflag: tar.TypeSymlink, Linkname: "../x", Mode: 0o777}))
	f.Add(tarOfF(tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}))
	f.Fuzz(func(t *testing.T, data []byte) {
		if checkArchive(context.Background(), bytes.NewReader(data)) != nil {
			return
		}
		root := t.TempDir()
		dest := filepath.Join(root, "ctx")
		if err := os.Mkdir(dest, 0o700); err != nil {
			t.Fatal(err)
		}
		ar, err := openArchive(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("accepted, then not openable: %v", err)
		}
		_ = template.Extract(context.Background(), ar, dest, template.Limits{MaxBytes: 1 << 20, MaxEntries: 1000})
		entries, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Fatalf("an accepted upload wrote outside its directory: %v", entries)
		}
	})
}

// tarOfF is a tar of hdrs, regular files filled with "x".
func tarOfF(hdrs ...tar.Header) []byte {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, h := range hdrs {
		_ = w.WriteHeader(&h)
		if h.Typeflag == tar.TypeReg {
			_, _ = w.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	_ = w.Close()
	return buf.Bytes()
}
