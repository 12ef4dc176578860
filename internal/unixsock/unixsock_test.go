package unixsock

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLongPaths(t *testing.T) {
	for _, depth := range []int{1, 12} {
		dir := t.TempDir()
		for i := range depth {
			dir = filepath.Join(dir, strings.Repeat("d", 10)+string(rune('a'+i)))
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "test.sock")
		ln, err := Listen(path)
		if err != nil {
			t.Fatalf("Listen(%d bytes): %v", len(path), err)
		}
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.Write([]byte("hi"))
				c.Close()
			}
		}()
		c, err := Dial(context.Background(), path)
		if err != nil {
			t.Fatalf("Dial(%d bytes): %v", len(path), err)
		}
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) != "hi" {
			t.Errorf("read %q", b)
		}
		ln.Close()
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("socket file left after Close (%d-byte path): %v", len(path), err)
		}
	}
}
