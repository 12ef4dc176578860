package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"

	"github.com/spacesandbox/space/internal/imagebuild"
	"github.com/spacesandbox/space/internal/template/dockerfile"
)

// A Dockerfile build runs its steps through the public API with
// internal/imagebuild, over the Go SDK (imagebuild.Client): the CLI parses
// the file and reports the result.

// dfImagePrefix begins the name of a template a Dockerfile's FROM oci:DIR
// or docker-archive:FILE is imported as.
const dfImagePrefix = imagebuild.DockerfileImportPrefix

// dockerfileJob is what `space template build NAME --dockerfile FILE` was
// asked.
type dockerfileJob struct {
	name, file, contextDir, runtime string
	egress                          []byte
	buildArgs                       map[string]string
	noCache                         bool
}

// dockerfileBuild runs `space template build NAME --dockerfile FILE`.
func dockerfileBuild(ctx context.Context, e *env, job dockerfileJob, wait time.Duration) (*sandboxv1.Template, error) {
	f, err := os.Open(job.file)
	if err != nil {
		return nil, fmt.Errorf("--dockerfile: %w", err)
	}
	df, err := dockerfile.Parse(f, job.buildArgs)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", job.file, err)
	}
	src, imageID, local, err := imagebuild.ImageSource(df.From, job.contextDir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", job.file, err)
	}
	if local {
		// The steps run on the image imported as a template named after its
		// identity, so the step keys (which start from FROM) include it.
		df.From = imagebuild.BaseName(dfImagePrefix, imageID)
	} else if strings.Contains(df.From, ":") || strings.Contains(df.From, "/") {
		return nil, fmt.Errorf("%s: FROM %s: not a SPACE template name, and SPACE pulls from no registry: save the image (docker save -o image.tar REF, or skopeo copy to an OCI layout) and write FROM docker-archive:image.tar or FROM oci:DIR", job.file, printable(df.From))
	}
	plan, err := imagebuild.Prepare(imagebuild.Job{
		Name: job.name, File: df, ContextDir: job.contextDir, Runtime: job.runtime,
		Egress: job.egress, NoCache: job.noCache, Log: e.stderr,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", job.file, err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if local {
		if err := imagebuild.ImportBase(ctx, imagebuild.Client{C: e.c}, src, df.From, e.stderr); err != nil {
			return nil, fmt.Errorf("%s: %w", job.file, err)
		}
	}
	t, err := imagebuild.Run(ctx, imagebuild.Client{C: e.c}, plan)
	if err == nil && local {
		// The build's holder uses its import now; the others may be
		// unused.
		if _, err := imagebuild.CollectImports(ctx, imagebuild.Client{C: e.c}, imagebuild.ImportTTL, time.Now(), df.From, e.stderr); err != nil {
			fmt.Fprintf(e.stderr, "space: warning: %v\n", err)
		}
	}
	return t, err
}
