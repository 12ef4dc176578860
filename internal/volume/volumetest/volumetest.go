// Package volumetest is the conformance suite every volume.Driver passes. A
// driver's test calls Run with a constructor that returns a fresh, empty
// driver (and registers its own cleanup).
package volumetest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/volume"
)

// Run runs the suite; newDriver must return an empty driver each call.
func Run(t *testing.T, newDriver func(t *testing.T) volume.Driver) {
	tests := []struct {
		name string
		fn   func(t *testing.T, d volume.Driver)
	}{
		{"Names", testNames},
		{"TemplateLifecycle", testTemplateLifecycle},
		{"CloneIsIndependent", testCloneIsIndependent},
		{"CloneErrors", testCloneErrors},
		{"SymlinksNotFollowed", testSymlinksNotFollowed},
		{"OwnersAndModes", testOwnersAndModes},
		{"ConcurrentClones", testConcurrentClones},
		{"DeleteIdempotent", testDeleteIdempotent},
		{"Volumes", testVolumes},
		{"Usage", testUsage},
		{"Snapshots", testSnapshots},
		{"SnapshotErrors", testSnapshotErrors},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newDriver(t)) })
	}
}

// sealedTemplate makes a sealed template holding /etc/hello ("hello").
func sealedTemplate(t *testing.T, d volume.Driver, name string) string {
	t.Helper()
	ctx := context.Background()
	p, err := d.CreateTemplate(ctx, name)
	if err != nil {
		t.Fatalf("CreateTemplate(%s): %v", name, err)
	}
	must(t, os.MkdirAll(filepath.Join(p, "etc"), 0o755))
	must(t, os.WriteFile(filepath.Join(p, "etc", "hello"), []byte("hello"), 0o644))
	if err := d.SealTemplate(ctx, name); err != nil {
		t.Fatalf("SealTemplate(%s): %v", name, err)
	}
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testNames(t *testing.T, d volume.Driver) {
	ctx := context.Background()
	for _, bad := range []string{"", ".", "..", "../x", "a/b", ".hidden", "-x", "A", "x\x00", string(make([]byte, 129))} {
		if _, err := d.CreateTemplate(ctx, bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("CreateTemplate(%q) = %v, want InvalidArgument", bad, err)
		}
		if _, err := d.Clone(ctx, "base", bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Clone(base, %q) = %v, want InvalidArgument", bad, err)
		}
		if err := d.Delete(ctx, bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Delete(%q) = %v, want InvalidArgument", bad, err)
		}
	}
}

func testTemplateLifecycle(t *testing.T, d volume.Driver) {
	ctx := context.Background()
	if _, err := d.CreateTemplate(ctx, "base"); err != nil {
		t.Fatalf("CreateTemplate: %v", err)
	}
	if _, err := d.CreateTemplate(ctx, "base"); !errdefs.IsConflict(err) {
		t.Errorf("second CreateTemplate = %v, want Conflict", err)
	}
	if got, err := d.Templates(ctx); err != nil || len(got) != 0 {
		t.Errorf("Templates before sealing = %v, %v; want none", got, err)
	}
	must(t, d.SealTemplate(ctx, "base"))
	must(t, d.SealTemplate(ctx, "base"))
	sealedTemplate(t, d, "alpha")
	if got, err := d.Templates(ctx); err != nil || !slices.Equal(got, []string{"alpha", "base"}) {
		t.Errorf("Templates = %v, %v; want [alpha base]", got, err)
	}
	if err := d.SealTemplate(ctx, "missing"); !errdefs.IsNotFound(err) {
		t.Errorf("SealTemplate(missing) = %v, want NotFound", err)
	}
	must(t, d.DeleteTemplate(ctx, "base"))
	must(t, d.DeleteTemplate(ctx, "base"))
	if got, _ := d.Templates(ctx); !slices.Equal(got, []string{"alpha"}) {
		t.Errorf("Templates after delete = %v, want [alpha]", got)
	}
}

func testCloneIsIndependent(t *testing.T, d volume.Driver) {
	ctx := context.Background()
	tpl := sealedTemplate(t, d, "base")
	a, err := d.Clone(ctx, "base", "vol-a")
	if err != nil {
		t.Fatalf("Clone: %v", err)
	}
	b, err := d.Clone(ctx, "base", "vol-b")
	must(t, err)
	if got, err := os.ReadFile(filepath.Join(a, "etc", "hello")); err != nil || string(got) != "hello" {
		t.Fatalf("clone content = %q, %v", got, err)
	}
	must(t, os.WriteFile(filepath.Join(a, "etc", "hello"), []byte("changed"), 0o644))
	must(t, os.WriteFile(filepath.Join(a, "new"), []byte("x"), 0o644))
	for _, p := range []string{filepath.Join(tpl, "etc", "hello"), filepath.Join(b, "etc", "hello")} {
		if got, _ := os.ReadFile(p); string(got) != "hello" {
			t.Errorf("%s = %q after writing the other clone, want hello", p, got)
		}
	}
	if _, err := os.Stat(filepath.Join(b, "new")); !os.IsNotExist(err) {
		t.Errorf("file created in one clone is visible in another: %v", err)
	}
	// Deleting the template leaves clones intact.
	must(t, d.DeleteTemplate(ctx, "base"))
	if got, _ := os.ReadFile(filepath.Join(b, "etc", "hello")); string(got) != "hello" {
		t.Errorf("clone after template delete = %q", got)
	}
	must(t, d.Delete(ctx, "vol-a"))
	must(t, d.Delete(ctx, "vol-b"))
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Errorf("volume dir still there after Delete: %v", err)
	}
}

func testCloneErrors(t *testing.T, d volume.Driver) {
	ctx := context.Background()
	if _, err := d.Clone(ctx, "missing", "v1"); !errdefs.IsNotFound(err) {
		t.Errorf("Clone(missing) = %v, want NotFound", err)
	}
	if _, err := d.CreateTemplate(ctx, "open"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Clone(ctx, "open", "v1"); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Clone(unsealed) = %v, want FailedPrecondition", err)
	}
	sealedTemplate(t, d, "base")
	if _, err := d.Clone(ctx, "base", "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Clone(ctx, "base", "v1"); !errdefs.IsConflict(err) {
		t.Errorf("second Clone(v1) = %v, want Conflict", err)
	}
	must(t, d.Delete(ctx, "v1"))
}

func testSymlinksNotFollowed(t *testing.T, d volume.Driver) {
	ctx := context.Background()
	outside := filepath.Join(t.TempDir(), "secret")
	must(t, os.WriteFile(outside, []byte("host secret"), 0o600))
	p, err := d.CreateTemplate(ctx, "links")
	must(t, err)
	must(t, os.Symlink(outside, filepath.Join(p, "abs")))
	must(t, os.Symlink("../../../../../../../../"+outside, filepath.Join(p, "rel")))
	must(t, os.Symlink(filepath.Dir(outside), filepath.Join(p, "dir")))
	must(t, d.SealTemplate(ctx, "links"))
	v, err := d.Clone(ctx, "links", "v-links")
	must(t, err)
	for _, name := range []string{"abs", "rel", "dir"} {
		fi, err := os.Lstat(filepath.Join(v, name))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s in the clone is %v (%v), want a symlink", name, fi.Mode(), err)
		}
	}
	must(t, d.Delete(ctx, "v-links"))
	if got, err := os.ReadFile(outside); err != nil || string(got) != "host secret" {
		t.Errorf("file outside the tree after Delete: %q, %v", got, err)
	}
	must(t, d.DeleteTemplate(ctx, "links"))
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("DeleteTemplate followed a symlink: %v", err)
	}
}

func testOwnersAndModes(t *testing.T, d volume.Driver) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to chown")
	}
	ctx := context.Background()
	p, err := d.CreateTemplate(ctx, "owners")
	must(t, err)
	f := filepath.Join(p, "setuid")
	must(t, os.WriteFile(f, []byte("x"), 0o755))
	must(t, os.Chown(f, 1000, 1000))
	must(t, os.Chmod(f, os.ModeSetuid|0o750))
	must(t, d.SealTemplate(ctx, "owners"))
	v, err := d.Clone(ctx, "owners", "v-owners")
	must(t, err)
	fi, err := os.Stat(filepath.Join(v, "setuid"))
	must(t, err)
	if fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o750 {
		t.Errorf("mode in clone = %v, want setuid 0750", fi.Mode())
	}
	if uid := statUID(fi); uid != 1000 {
		t.Errorf("owner in clone = %d, want 1000", uid)
	}
	must(t, d.Delete(ctx, "v-owners"))
}

func testConcurrentClones(t *testing.T, d volume.Driver) {
	ctx := context.Background()
	sealedTemplate(t, d, "base")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "c" + string(rune('0'+i))
			if _, err := d.Clone(ctx, "base", id); err != nil {
				errs <- err
				return
			}
			errs <- d.Delete(ctx, id)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func testDeleteIdempotent(t *testing.T, d volume.Driver) {
	ctx := context.Background()
	if err := d.Delete(ctx, "never-existed"); err != nil {
		t.Errorf("Delete(missing) = %v, want nil", err)
	}
	if err := d.DeleteTemplate(ctx, "never-existed"); err != nil {
		t.Errorf("DeleteTemplate(missing) = %v, want nil", err)
	}
}

// testVolumes: Volumes lists what Clone and CloneSnapshot made and Delete
// has not removed (the node-manager finds a leftover volume by it).
func testVolumes(t *testing.T, d volume.Driver) {
	ctx := context.Background()
	if got, err := d.Volumes(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Volumes of a new store = %v, %v; want none", got, err)
	}
	sealedTemplate(t, d, "base")
	_, err := d.Clone(ctx, "base", "vol-b")
	must(t, err)
	_, err = d.Clone(ctx, "base", "vol-a")
	must(t, err)
	_, err = d.Snapshot(ctx, "vol-a", "snap")
	must(t, err)
	_, err = d.CloneSnapshot(ctx, "snap", "vol-c")
	must(t, err)
	if got, err := d.Volumes(ctx); err != nil || !slices.Equal(got, []string{"vol-a", "vol-b", "vol-c"}) {
		t.Errorf("Volumes = %v, %v; want [vol-a vol-b vol-c] (no template, no snapshot)", got, err)
	}
	must(t, d.Delete(ctx, "vol-b"))
	if got, err := d.Volumes(ctx); err != nil || !slices.Equal(got, []string{"vol-a", "vol-c"}) {
		t.Errorf("Volumes after Delete(vol-b) = %v, %v; want [vol-a vol-c]", got, err)
	}
}

func testUsage(t *testing.T, d volume.Driver) {
	u, err := d.Usage(context.Background())
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	if u.TotalBytes == 0 || u.FreeBytes > u.TotalBytes {
		t.Errorf("Usage = %+v", u)
	}
}

// testSnapshots: a snapshot is a point-in-time copy that later writes to the
// volume do not change, that outlives the volume, and that clones into
// independent volumes as often as asked.
func testSnapshots(t *testing.T, d volume.Driver) {
	ctx := context.Background()
	sealedTemplate(t, d, "base")
	v, err := d.Clone(ctx, "base", "vol")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(v, "state"), []byte("one"), 0o600))
	must(t, os.Symlink("/etc/shadow", filepath.Join(v, "link")))
	snap, err := d.Snapshot(ctx, "vol", "snap-1")
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	must(t, os.WriteFile(filepath.Join(v, "state"), []byte("two"), 0o600))
	must(t, os.RemoveAll(filepath.Join(v, "etc")))
	if got, _ := os.ReadFile(filepath.Join(snap, "state")); string(got) != "one" {
		t.Errorf("snapshot state = %q after writing the volume, want one", got)
	}
	must(t, d.Delete(ctx, "vol"))
	for _, id := range []string{"back-1", "back-2"} {
		c, err := d.CloneSnapshot(ctx, "snap-1", id)
		if err != nil {
			t.Fatalf("CloneSnapshot(%s): %v", id, err)
		}
		if got, _ := os.ReadFile(filepath.Join(c, "state")); string(got) != "one" {
			t.Errorf("%s: state = %q, want one", id, got)
		}
		if got, _ := os.ReadFile(filepath.Join(c, "etc", "hello")); string(got) != "hello" {
			t.Errorf("%s: etc/hello = %q, want hello (the snapshot predates the rm)", id, got)
		}
		if target, err := os.Readlink(filepath.Join(c, "link")); err != nil || target != "/etc/shadow" {
			t.Errorf("%s: link = %q, %v; want the link itself, not followed", id, target, err)
		}
		must(t, os.WriteFile(filepath.Join(c, "state"), []byte(id), 0o600))
	}
	if got, _ := os.ReadFile(filepath.Join(snap, "state")); string(got) != "one" {
		t.Errorf("snapshot changed by writes to its clones: %q", got)
	}
	if got, err := d.Snapshots(ctx); err != nil || !slices.Equal(got, []string{"snap-1"}) {
		t.Errorf("Snapshots = %v, %v; want [snap-1]", got, err)
	}
	must(t, d.DeleteSnapshot(ctx, "snap-1"))
	must(t, d.DeleteSnapshot(ctx, "snap-1"))
	if got, err := d.Snapshots(ctx); err != nil || len(got) != 0 {
		t.Errorf("Snapshots after delete = %v, %v", got, err)
	}
	if got, _ := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(snap)), "volumes", "back-1", "state")); string(got) != "back-1" {
		t.Errorf("a clone did not outlive its snapshot: %q", got)
	}
	must(t, d.Delete(ctx, "back-1"))
	must(t, d.Delete(ctx, "back-2"))
}

func testSnapshotErrors(t *testing.T, d volume.Driver) {
	ctx := context.Background()
	if _, err := d.Snapshot(ctx, "missing", "s"); !errdefs.IsNotFound(err) {
		t.Errorf("Snapshot of a missing volume: %v, want NotFound", err)
	}
	if _, err := d.CloneSnapshot(ctx, "missing", "v"); !errdefs.IsNotFound(err) {
		t.Errorf("CloneSnapshot of a missing snapshot: %v, want NotFound", err)
	}
	sealedTemplate(t, d, "base")
	_, err := d.Clone(ctx, "base", "vol")
	must(t, err)
	_, err = d.Snapshot(ctx, "vol", "s")
	must(t, err)
	if _, err := d.Snapshot(ctx, "vol", "s"); !errdefs.IsConflict(err) {
		t.Errorf("second Snapshot with one name: %v, want Conflict", err)
	}
	if _, err := d.CloneSnapshot(ctx, "s", "vol"); !errdefs.IsConflict(err) {
		t.Errorf("CloneSnapshot onto an existing volume: %v, want Conflict", err)
	}
	for _, bad := range []string{"", "..", "../x", "a/b", ".hidden"} {
		if _, err := d.Snapshot(ctx, "vol", bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Snapshot name %q: %v, want InvalidArgument", bad, err)
		}
		if _, err := d.CloneSnapshot(ctx, bad, "v2"); !errdefs.IsInvalidArgument(err) {
			t.Errorf("CloneSnapshot name %q: %v, want InvalidArgument", bad, err)
		}
	}
	must(t, d.DeleteSnapshot(ctx, "s"))
	must(t, d.Delete(ctx, "vol"))
}
