package dockerfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; a refusal carries a line inside the input;
// every accepted COPY/ADD source stays inside the context when cleaned.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"FROM base\nRUN echo hi\n",
		"ARG B=x\nFROM ${B:-y}\nENV A=1 B=\"2 3\" \\\n C='$A'\nCOPY a b/ /d/\n",
		"FROM base\nRUN <<EOF\nx\nEOF\n",
		"# syntax=x\nFROM oci:/img\nCMD [\"a\",\"b\"]\nEXPOSE 80/tcp\nLABEL a=b\n",
		"FROM base\nCOPY ../x /y\n",
		"FROM base\nADD [\"a\", \"/b\"]\nUSER ${U:+u}\nWORKDIR /w\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		file, err := Parse(strings.NewReader(src), nil)
		if err != nil {
			var pe *Error
			if errors.As(err, &pe) {
				if n := strings.Count(src, "\n") + 1; pe.Line < 1 || pe.Line > n {
					t.Fatalf("error line %d outside 1..%d: %v", pe.Line, n, err)
				}
			}
			return
		}
		if file.From == "" {
			t.Fatalf("accepted without FROM")
		}
		for _, s := range file.Steps {
			if s.Text == "" {
				t.Fatalf("step at line %d has no Text", s.Line)
			}
			if s.Cmd != "COPY" && s.Cmd != "ADD" {
				continue
			}
			for _, src := range s.Args[:len(s.Args)-1] {
				rel, err := cleanSource(src)
				if err != nil {
					t.Fatalf("accepted source %q that cleanSource refuses: %v", src, err)
				}
				if rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
					t.Fatalf("source %q cleans to %q, outside the context", src, rel)
				}
			}
		}
	})
}

// FuzzResolveSource: whatever the source string, ResolveSource returns a path
// inside the context (after resolving every symlink on it) or an error. The
// context holds links inside, links out (relative and absolute) and a loop.
func FuzzResolveSource(f *testing.F) {
	outside := f.TempDir()
	ctx := f.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
	os.MkdirAll(filepath.Join(ctx, "a/b"), 0o755)
	os.WriteFile(filepath.Join(ctx, "a/b/f"), []byte("f"), 0o644)
	os.Symlink("b", filepath.Join(ctx, "a/in"))
	os.Symlink("../..", filepath.Join(ctx, "a/up"))
	os.Symlink("..", filepath.Join(ctx, "a/b/parent"))
	os.Symlink(outside, filepath.Join(ctx, "abs"))
	os.Symlink(ctx+"/a", filepath.Join(ctx, "absin"))
	os.Symlink("loop", filepath.Join(ctx, "loop"))
	realCtx, err := filepath.EvalSymlinks(ctx)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"a/b/f", "a/in/f", "a/up/x", "abs/secret", "absin/b/parent/up", "a/b/parent/b/f", "loop", "../x", "/a/./b//f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		got, err := ResolveSource(ctx, src)
		if err != nil {
			return
		}
		real, err := filepath.EvalSymlinks(got)
		if err != nil {
			t.Fatalf("ResolveSource(%q) = %q which does not resolve: %v", src, got, err)
		}
		if real != got {
			t.Fatalf("ResolveSource(%q) = %q, which still has a symlink (really %q)", src, got, real)
		}
		if r, err := filepath.Rel(realCtx, real); err != nil || r == ".." || strings.HasPrefix(r, "../") {
			t.Fatalf("ResolveSource(%q) = %q, outside the context %q", src, real, realCtx)
		}
	})
}
