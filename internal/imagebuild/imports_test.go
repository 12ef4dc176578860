package imagebuild

import (
	"context"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"

	"github.com/spacesandbox/space/internal/errdefs"
)

// fakeImports is a server's templates, of which those in used are used by
// sandboxes.
type fakeImports struct {
	list    []sandboxv1.Template
	used    map[string]bool
	deletes []string // every name DeleteTemplate was asked for
}

func (f *fakeImports) Templates(context.Context) ([]sandboxv1.Template, error) {
	return slices.Clone(f.list), nil
}

func (f *fakeImports) DeleteTemplate(_ context.Context, name string) error {
	f.deletes = append(f.deletes, name)
	if f.used[name] {
		return fmt.Errorf("template %s: still used by sandboxes: %w", name, errdefs.ErrConflict)
	}
	i := slices.IndexFunc(f.list, func(t sandboxv1.Template) bool { return t.Name == name })
	if i < 0 {
		return fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
	}
	f.list = slices.Delete(f.list, i, i+1)
	return nil
}

// TestCollectImports: only imports (dfimg-, e2bimg-) older than the bound,
// not building, not the one to keep, are deleted, and of those the server
// keeps the ones sandboxes use; other templates are never asked for.
func TestCollectImports(t *testing.T) {
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	old, fresh := now.Add(-ImportTTL-time.Hour), now.Add(-ImportTTL+time.Hour)
	f := &fakeImports{
		list: []sandboxv1.Template{
			{Name: "dfimg-0000000000000001", State: "ready", CreatedAt: old},
			{Name: "e2bimg-0000000000000002", State: "ready", CreatedAt: old},
			{Name: "dfimg-0000000000000003", State: "failed", CreatedAt: old},
			{Name: "dfimg-0000000000000004", State: "ready", CreatedAt: old},    // used
			{Name: "e2bimg-0000000000000005", State: "ready", CreatedAt: fresh}, // too new
			{Name: "dfimg-0000000000000006", State: "building", CreatedAt: old},
			{Name: "dfimg-0000000000000007", State: "ready", CreatedAt: old}, // kept by the caller
			{Name: "app", State: "ready", CreatedAt: old},
			{Name: "dfimg", State: "ready", CreatedAt: old},
			{Name: "minimal", State: "ready", CreatedAt: old},
		},
		used: map[string]bool{"dfimg-0000000000000004": true},
	}
	got, err := CollectImports(context.Background(), f, ImportTTL, now, "dfimg-0000000000000007", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	wantDeleted := []string{"dfimg-0000000000000001", "e2bimg-0000000000000002", "dfimg-0000000000000003"}
	if !slices.Equal(got.Deleted, wantDeleted) || !slices.Equal(got.Used, []string{"dfimg-0000000000000004"}) {
		t.Errorf("collected %+v, want deleted %v and used [dfimg-0000000000000004]", got, wantDeleted)
	}
	if want := append(wantDeleted, "dfimg-0000000000000004"); !slices.Equal(f.deletes, want) {
		t.Errorf("asked to delete %v, want only %v", f.deletes, want)
	}
	// Another collection (meanwhile) finds nothing more to delete.
	f.deletes = nil
	if got, err := CollectImports(context.Background(), f, ImportTTL, now, "", io.Discard); err != nil || len(got.Deleted) != 1 || got.Deleted[0] != "dfimg-0000000000000007" {
		t.Errorf("second collection without keep: %+v, %v; want only dfimg-0000000000000007 deleted", got, err)
	}
}
