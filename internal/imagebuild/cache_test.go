package imagebuild

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/template/dockerfile"
)

// TestCacheName: a cached step's snapshot name holds the whole key (two
// keys differing in the last hex digit get different names), fits a
// snapshot name, and a malformed key is refused.
func TestCacheName(t *testing.T) {
	a := strings.Repeat("f", 64)
	b := strings.Repeat("f", 63) + "e"
	na, err := cacheName(a)
	if err != nil {
		t.Fatal(err)
	}
	nb, _ := cacheName(b)
	zero, _ := cacheName(strings.Repeat("0", 64))
	if na == nb {
		t.Errorf("keys %s and %s share name %s", a, b, na)
	}
	for _, n := range []string{na, nb, zero} {
		if len(n) != len(CacheNamePrefix)+50 || len(n) > 63 || !strings.HasPrefix(n, CacheNamePrefix) {
			t.Errorf("name %q: want %s and 50 base-36 digits", n, CacheNamePrefix)
		}
	}
	for _, bad := range []string{"", "abc", strings.Repeat("g", 64), strings.Repeat("f", 65)} {
		if _, err := cacheName(bad); err == nil {
			t.Errorf("cacheName(%q) = nil error, want one", bad)
		}
	}
}

// TestStepKeysAndCachedPrefix: the keys chain (a changed COPY source
// changes its step's key and every later one, not the earlier); the
// cached prefix is up to the last cached filesystem step plus the
// metadata-only steps after it; a key that matches no name exactly (here:
// another build arg, another file) is not reused; an empty cache (another
// tenant's: the server shows a tenant only its own names) reuses nothing.
func TestStepKeysAndCachedPrefix(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one"), 0o644)
	text := "FROM minimal\nARG V=1\nENV E=$V\nWORKDIR /app\nCOPY a.txt ./\nRUN cat a.txt\nCMD [\"true\"]\n"
	parse := func(args map[string]string) *dockerfile.File {
		f, err := dockerfile.Parse(strings.NewReader(text), args)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	df := parse(nil)
	keys, err := stepKeys(df, dir)
	if err != nil {
		t.Fatal(err)
	}
	// The index of a build that cached every filesystem step.
	idx := map[string]cacheEntry{}
	for i, in := range df.Steps {
		if changesFS(in) {
			n, _ := cacheName(keys[i])
			idx[n] = cacheEntry{holder: "h", snapshot: "sn-" + in.Cmd}
		}
	}
	if n, from := cachedPrefix(df.Steps, keys, idx); n != len(df.Steps) || from.snapshot != "sn-RUN" {
		t.Errorf("unchanged: %d steps cached from %q, want all %d from sn-RUN", n, from.snapshot, len(df.Steps))
	}
	if n, _ := cachedPrefix(df.Steps, keys, map[string]cacheEntry{}); n != 0 {
		t.Errorf("empty cache: %d steps cached, want 0", n)
	}

	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("two"), 0o644)
	changed, err := stepKeys(df, dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range keys {
		same := keys[i] == changed[i]
		if wantSame := i < 3; same != wantSame { // ARG, ENV, WORKDIR before the COPY
			t.Errorf("step %d (%s) after a.txt changed: key same %v, want %v", i+1, df.Steps[i].Cmd, same, wantSame)
		}
	}
	if n, from := cachedPrefix(df.Steps, changed, idx); n != 3 || from.snapshot != "sn-WORKDIR" {
		t.Errorf("a.txt changed: %d steps cached from %q, want 3 from sn-WORKDIR", n, from.snapshot)
	}

	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("one"), 0o644)
	other := parse(map[string]string{"V": "2"})
	otherKeys, err := stepKeys(other, dir)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := cachedPrefix(other.Steps, otherKeys, idx); n != 0 {
		t.Errorf("--build-arg V=2: %d steps cached, want 0 (the ARG step's key differs)", n)
	}
}

// TestBuildArgInRunEnv: a --build-arg value reaches RUN's environment
// through its ARG, and an ENV of the same name wins, as in Docker.
func TestBuildArgInRunEnv(t *testing.T) {
	f, err := dockerfile.Parse(strings.NewReader("FROM minimal\nARG WHO=nobody\nARG X=a\nENV X=b\nRUN echo $WHO\n"), map[string]string{"WHO": "me"})
	if err != nil {
		t.Fatal(err)
	}
	st := &buildState{env: map[string]string{}}
	for _, in := range f.Steps {
		if st.apply(in) {
			continue
		}
		env := st.runStart(in).Env
		if env["WHO"] != "me" || env["X"] != "b" {
			t.Errorf("RUN env %v: want WHO=me (the build arg) and X=b (ENV over ARG)", env)
		}
	}
}

// TestAfterBuild: a successful build keeps the newest cacheKeep holders of
// its template name and cacheKeepTenant of all, its own new holder counted
// in both and never deleted.
func TestAfterBuild(t *testing.T) {
	var holders []Holder
	ids := func(hs []Holder) []string {
		var out []string
		for _, h := range hs {
			out = append(out, h.ID)
		}
		return out
	}
	// Oldest first: 4 of "app", then cacheKeepTenant-3 of other names.
	for i := range 4 {
		holders = append(holders, Holder{ID: fmt.Sprintf("app%d", i), Template: "app"})
	}
	for i := range cacheKeepTenant - 3 {
		holders = append(holders, Holder{ID: fmt.Sprintf("other%d", i), Template: fmt.Sprintf("t%d", i)})
	}
	// The new holder of app: app0 and app1 go for the per-name bound (2
	// old ones kept), leaving 2 + 13 + the new one = 16, within the
	// tenant's bound.
	if got, want := ids(afterBuild(holders, "app", "new")), []string{"app0", "app1"}; !slices.Equal(got, want) {
		t.Errorf("after a build of app: deletes %v, want %v", got, want)
	}
	// A build of another name leaves app's 4 to the per-name bound of
	// app's next build, but the tenant's bound holds: 4 + 13 + the new
	// one = 18, so the tenant's oldest 2 go.
	if got, want := ids(afterBuild(holders, "fresh", "new")), []string{"app0", "app1"}; !slices.Equal(got, want) {
		t.Errorf("after a build of a new name: deletes %v, want %v (the tenant's oldest)", got, want)
	}
	more := append(slices.Clone(holders), Holder{ID: "other-last", Template: "t-last"}, Holder{ID: "new", Template: "fresh"})
	got := afterBuild(more, "fresh", "new")
	if slices.ContainsFunc(got, func(h Holder) bool { return h.ID == "new" }) || len(more)-len(got) != cacheKeepTenant {
		t.Errorf("with the new holder listed: deletes %v, want the new one kept and %d left", ids(got), cacheKeepTenant)
	}
}
