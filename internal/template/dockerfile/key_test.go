package dockerfile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestStepKeyChangesOnlyWithInputs(t *testing.T) {
	f := parse(t, "FROM base\nRUN a\nRUN b\n")
	k1 := StepKey("p", f.Steps[0], "")
	if k1 != StepKey("p", f.Steps[0], "") {
		t.Fatal("StepKey not deterministic")
	}
	for name, k := range map[string]string{
		"parent":  StepKey("q", f.Steps[0], ""),
		"text":    StepKey("p", f.Steps[1], ""),
		"content": StepKey("p", f.Steps[0], "h"),
	} {
		if k == k1 {
			t.Errorf("changing the %s left the key unchanged", name)
		}
	}
}

func TestContentHash(t *testing.T) {
	ctx := t.TempDir()
	os.MkdirAll(filepath.Join(ctx, "d"), 0o755)
	os.WriteFile(filepath.Join(ctx, "d/a"), []byte("one"), 0o644)
	os.WriteFile(filepath.Join(ctx, "b"), []byte("two"), 0o644)
	os.Symlink("a", filepath.Join(ctx, "d/l"))
	h := func() string {
		t.Helper()
		s, err := ContentHash(ctx, []string{"d", "b"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	h0 := h()
	if h() != h0 {
		t.Fatal("ContentHash not deterministic")
	}
	os.WriteFile(filepath.Join(ctx, "d/a"), []byte("ONE"), 0o644)
	h1 := h()
	if h1 == h0 {
		t.Error("changing a file's bytes left the hash unchanged")
	}
	os.Chmod(filepath.Join(ctx, "b"), 0o755)
	if h() == h1 {
		t.Error("changing a file's mode left the hash unchanged")
	}
	os.WriteFile(filepath.Join(ctx, "unrelated"), []byte("x"), 0o644)
	h2 := h()
	os.WriteFile(filepath.Join(ctx, "unrelated"), []byte("y"), 0o644)
	if h() != h2 {
		t.Error("a file not copied changed the hash")
	}
	if _, err := ContentHash(ctx, []string{"../x"}); err == nil || !strings.Contains(err.Error(), "outside the build context") {
		t.Errorf("ContentHash(../x) = %v, want outside the build context", err)
	}
}

func TestImageConfigJSON(t *testing.T) {
	f := parse(t, `FROM base
ENV A=1 B=2
ENV A=3
USER app
WORKDIR /srv
WORKDIR web
CMD ["old"]
ENTRYPOINT ["/entry"]
CMD serve
EXPOSE 8080 53/udp
LABEL k=v
`)
	b, err := ImageConfigJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"User":         "app",
		"Env":          []any{"A=3", "B=2"},
		"WorkingDir":   "/srv/web",
		"Entrypoint":   []any{"/entry"},
		"Cmd":          []any{"/bin/sh", "-c", "serve"},
		"ExposedPorts": map[string]any{"8080/tcp": map[string]any{}, "53/udp": map[string]any{}},
		"Labels":       map[string]any{"k": "v"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("image config:\n got %s\nwant %v (keys %v)", b, want, sortedKeys(want))
	}
	empty, _ := ImageConfigJSON(parse(t, "FROM base\nRUN true\n"))
	if strings.TrimSpace(string(empty)) != "{}" {
		t.Errorf("no defaults: got %s, want {} (absent fields omitted)", empty)
	}
}

// sortedKeys lists a map's keys in order, to print maps stably.
func sortedKeys[M ~map[string]V, V any](m M) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
