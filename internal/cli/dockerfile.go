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
	if strings.Contains(df.From, ":") || strings.Contains(df.From, "/") {
		return nil, fmt.Errorf("%s: FROM %s: not a SPACE template name; import an image first (space template build BASE --from oci:DIR) and write FROM BASE", job.file, printable(df.From))
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
	return imagebuild.Run(ctx, imagebuild.Client{C: e.c}, plan)
}
