package cli

import (
	"path/filepath"
	"testing"
)

// TestTemplateSource: builtin:NAME names the server's built-in template; the
// other forms keep their meaning.
func TestTemplateSource(t *testing.T) {
	dir := t.TempDir()
	for from, want := range map[string]string{
		"builtin:code-interpreter": "code-interpreter",
		"builtin:base":             "base",
		"debootstrap:bookworm+git": "debootstrap:bookworm+git",
		"dir:" + dir:               "dir:" + dir,
		dir:                        "dir:" + dir,
		"oci:" + dir + "/#app:1":   "oci:" + dir + "#app:1",
		"docker-archive:" + dir + "/../x.tar#a/b:1": "docker-archive:" + filepath.Dir(dir) + "/x.tar#a/b:1",
	} {
		got, err := templateSource(from)
		if err != nil || got != want {
			t.Errorf("templateSource(%q) = %q, %v; want %q", from, got, err, want)
		}
	}
	if _, err := templateSource(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing path: no error")
	}
}
