package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"

	"github.com/spacesandbox/space/internal/errdefs"
	space "github.com/spacesandbox/space/sdk/go"
)

// An image a build starts FROM (a Dockerfile's FROM oci:/docker-archive:,
// an E2B fromImage) is imported once as a template of its own, named after
// the image's content (ImportBase, BaseName). Such an import is only ever a
// base: the template a build makes is a copy of its build sandbox's disk,
// so once no sandbox is made from the import any more (no build sandbox,
// no step-cache holder, which live at most cacheTTL) it serves only the
// next build of the same image, which can import it again. CollectImports
// removes those older than ImportTTL: `space template gc` runs it on
// demand, and every build FROM an image runs it once it has finished. The
// server decides what is in use: it refuses to delete a template any
// sandbox of any tenant was made from (in the same transaction as the
// delete), so an import in use is never removed, whoever uses it.

const (
	// DockerfileImportPrefix begins the name of a template a Dockerfile's
	// FROM oci:DIR or docker-archive:FILE is imported as.
	DockerfileImportPrefix = "dfimg-"
	// E2BImportPrefix begins the name of a template an E2B fromImage is
	// imported as.
	E2BImportPrefix = "e2bimg-"
	// ImportTTL is how old an unused import must be before a build's
	// collection removes it: the step cache's holders' lifetime, so an
	// import outlives the cache built on it.
	ImportTTL = 7 * 24 * time.Hour
)

// IsImport reports whether template name is an image import.
func IsImport(name string) bool {
	return strings.HasPrefix(name, DockerfileImportPrefix) || strings.HasPrefix(name, E2BImportPrefix)
}

// Imports is what collecting imports needs; Client has it (an admin key).
type Imports interface {
	// Templates lists the server's templates.
	Templates(ctx context.Context) ([]sandboxv1.Template, error)
	// DeleteTemplate deletes template name: errdefs.ErrConflict when the
	// server refused because sandboxes use it, errdefs.ErrNotFound when it
	// is gone already.
	DeleteTemplate(ctx context.Context, name string) error
}

// Collected is what CollectImports did.
type Collected struct {
	// Deleted are the imports removed, Used those kept because sandboxes
	// use them.
	Deleted, Used []string
}

// CollectImports deletes the import templates (IsImport) created before
// now-olderThan, except keep and those still building, that no sandbox
// uses, and logs each to log.
func CollectImports(ctx context.Context, b Imports, olderThan time.Duration, now time.Time, keep string, log io.Writer) (Collected, error) {
	var out Collected
	list, err := b.Templates(ctx)
	if err != nil {
		return out, fmt.Errorf("collect unused imports: %w", err)
	}
	for _, t := range list {
		if !IsImport(t.Name) || t.Name == keep || t.State == "building" || !t.CreatedAt.Before(now.Add(-olderThan)) {
			continue
		}
		err := b.DeleteTemplate(ctx, t.Name)
		switch {
		case errors.Is(err, errdefs.ErrConflict):
			out.Used = append(out.Used, t.Name)
			continue
		case errors.Is(err, errdefs.ErrNotFound):
			continue // removed meanwhile by another collection
		case err != nil:
			return out, fmt.Errorf("collect unused imports: %w", err)
		}
		fmt.Fprintf(log, "base: removed import %s (of %s, created %s), which no sandbox uses\n", t.Name, printable(t.Source), t.CreatedAt.UTC().Format(time.RFC3339))
		out.Deleted = append(out.Deleted, t.Name)
	}
	return out, nil
}

var _ Imports = Client{}

// Templates implements Imports.
func (c Client) Templates(ctx context.Context) ([]sandboxv1.Template, error) {
	return c.C.ListTemplates(ctx)
}

// DeleteTemplate implements Imports: the server answers Conflict for a
// template sandboxes use, NotFound for one deleted meanwhile.
func (c Client) DeleteTemplate(ctx context.Context, name string) error {
	err := c.C.DeleteTemplate(ctx, name)
	switch {
	case space.IsCode(err, sandboxv1.CodeConflict):
		return fmt.Errorf("%w: %v", errdefs.ErrConflict, err)
	case space.IsNotFound(err):
		return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	}
	return err
}
