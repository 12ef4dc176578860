package objstoretest_test

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/objstore/filestore"
	"github.com/spacesandbox/space/internal/objstore/objstoretest"
)

func newFaulty(t *testing.T) *objstoretest.Faulty {
	s, err := filestore.Open(t.Context(), filepath.Join(t.TempDir(), "objects"))
	if err != nil {
		t.Fatal(err)
	}
	f := objstoretest.NewFaulty(s)
	t.Cleanup(func() { f.Close() })
	return f
}

// TestFaultyHealthyConforms: a healthy Faulty is a correct Store.
func TestFaultyHealthyConforms(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newFaulty(t) })
}

func TestFaultyDown(t *testing.T) {
	f := newFaulty(t)
	ctx := t.Context()
	if _, err := f.Put(ctx, "a", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	f.SetDown(true)
	if _, err := f.Put(ctx, "b", strings.NewReader("x"), 1); !errdefs.IsUnavailable(err) {
		t.Errorf("Put while down: %v", err)
	}
	if _, _, err := f.Get(ctx, "a"); !errdefs.IsUnavailable(err) {
		t.Errorf("Get while down: %v", err)
	}
	if _, err := f.Stat(ctx, "a"); !errdefs.IsUnavailable(err) {
		t.Errorf("Stat while down: %v", err)
	}
	if _, err := f.List(ctx, ""); !errdefs.IsUnavailable(err) {
		t.Errorf("List while down: %v", err)
	}
	if err := f.Delete(ctx, "a"); !errdefs.IsUnavailable(err) {
		t.Errorf("Delete while down: %v", err)
	}
	f.SetDown(false)
	if _, err := f.Stat(ctx, "a"); err != nil {
		t.Errorf("Stat after coming back: %v", err)
	}
	if _, err := f.Stat(ctx, "b"); !errdefs.IsNotFound(err) {
		t.Errorf("the Put made while down left an object: %v", err)
	}
}

func TestFaultyFailAfter(t *testing.T) {
	f := newFaulty(t)
	ctx := t.Context()
	f.FailAfter(5 << 20)
	data := bytes.Repeat([]byte{7}, 3<<20)
	if _, err := f.Put(ctx, "fits", bytes.NewReader(data), -1); err != nil {
		t.Fatalf("Put within the budget: %v", err)
	}
	_, err := f.Put(ctx, "breaks", objstoretest.Generator(1, 8<<20), 8<<20)
	if !errdefs.IsUnavailable(err) {
		t.Fatalf("Put past the budget: err = %v, want Unavailable", err)
	}
	if !f.Down() {
		t.Errorf("store not down after the budget ran out")
	}
	f.Reset()
	if _, err := f.Stat(ctx, "breaks"); !errdefs.IsNotFound(err) {
		t.Errorf("a Put broken mid-stream left an object: %v", err)
	}
	// Reads are charged too, and a broken read is an error, not a short EOF.
	f.FailAfter(1 << 20)
	rc, _, err := f.Get(ctx, "fits")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if !errors.Is(err, errdefs.ErrUnavailable) || n != 1<<20 {
		t.Errorf("Get past the budget read %d bytes, err %v; want %d bytes then Unavailable", n, err, 1<<20)
	}
}
