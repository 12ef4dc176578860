// Package imagebuild builds a template from Dockerfile steps: a build
// sandbox from the FROM template, each RUN an exec in it (with the ENV,
// WORKDIR and USER so far), each COPY/ADD the context's files written
// into it, then the image defaults at /etc/space/image-config.json, a disk
// snapshot, and the template built from that snapshot (source
// snapshot:ID), which is then removed. cache.go has the step cache.
//
// The steps reach the sandbox only through Backend, the operations of
// SPACE's public API that a build needs, so a build can do nothing its
// caller could not do with those calls: the CLI's `space template build
// --dockerfile` implements Backend over the Go SDK (Client), and so can a
// server surface that builds for a caller.
package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
	"unicode"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/template/dockerfile"
	"github.com/spacesandbox/space/internal/template/imagecfg"
	space "github.com/spacesandbox/space/sdk/go"
)

// Backend is what a build does in SPACE, as its caller.
type Backend interface {
	// TemplateTaken reports whether the caller has a ready or building
	// template name, which a build would fail to replace at the end.
	TemplateTaken(ctx context.Context, name string) (bool, error)
	// CreateSandbox creates a sandbox and waits until it runs; it returns
	// its id.
	CreateSandbox(ctx context.Context, req sandboxv1.CreateSandboxRequest) (string, error)
	// ForkSandbox forks sandbox holder from its snapshot snapshot with
	// timeout timeout and waits until the fork runs; it returns its id.
	ForkSandbox(ctx context.Context, holder, snapshot, timeout string) (string, error)
	// DeleteSandbox deletes sandbox id.
	DeleteSandbox(ctx context.Context, id string) error
	// Exec runs start in sandbox id, streaming its output to stdout and
	// stderr, and returns its exit code.
	Exec(ctx context.Context, id string, start sandboxv1.ExecStart, stdout, stderr io.Writer) (int, error)
	// WriteFile writes r to file path in sandbox id.
	WriteFile(ctx context.Context, id, path string, r io.Reader) error
	// Snapshot takes a disk snapshot of sandbox id (named name unless
	// empty) and waits until it is ready. It returns the snapshot's id
	// whenever one was assigned, also with an error, so it can be deleted.
	Snapshot(ctx context.Context, id, name string) (string, error)
	// DeleteSnapshot deletes snapshot snapID of sandbox id.
	DeleteSnapshot(ctx context.Context, id, snapID string) error
	// BuildTemplate builds a template and waits until it is ready.
	BuildTemplate(ctx context.Context, req sandboxv1.BuildTemplateRequest) (*sandboxv1.Template, error)
}

// Job is one build.
type Job struct {
	// Name is the template's.
	Name string
	// File is the parsed Dockerfile; its FROM names a SPACE template.
	File *dockerfile.File
	// ContextDir holds the COPY and ADD sources (confined to it).
	ContextDir string
	// Runtime is the build sandbox's: vm or ns, or "" for the server's
	// default (what a create naming no runtime gets). A cached step is
	// reused only from a holder of this runtime ("": of any), so the steps
	// after it run where the caller asked.
	Runtime string
	// Egress is the template's egress policy (JSON), if any.
	Egress []byte
	// NoCache runs every step, cached or not.
	NoCache bool
	// Log gets the step lines and the RUN steps' output.
	Log io.Writer
	// Ready, when not "", is a shell command that must exit 0 before the
	// snapshot: the image's start command is started in the build
	// sandbox, then Ready is run once a second until it exits 0, for at
	// most ReadyTimeout (0: DefaultReadyTimeout). It is also the
	// template's SpaceReadyCmd (imagecfg): every sandbox made from the
	// template runs it after its start command before its first request,
	// for at most ReadyTimeout capped at imagecfg.MaxReadyTimeout (0:
	// imagecfg.DefaultReadyTimeout).
	Ready        string
	ReadyTimeout time.Duration
}

// DefaultReadyTimeout bounds a Ready check when the job names no bound.
const DefaultReadyTimeout = 5 * time.Minute

// StepError is a step's failure.
type StepError struct {
	// Index is the step's, 0-based, in File.Steps; len(File.Steps) is the
	// ready check.
	Index int
	Err   error
}

func (e *StepError) Error() string { return e.Err.Error() }

func (e *StepError) Unwrap() error { return e.Err }

// Plan is what Prepare computed of a job before any step runs.
type Plan struct {
	job     Job
	cfgJSON []byte
	keys    []string
}

// Prepare checks job and computes its image config and step keys; its
// errors are the Dockerfile's.
func Prepare(job Job) (*Plan, error) {
	cfgJSON, err := dockerfile.ImageConfigJSON(job.File)
	if err != nil {
		return nil, err
	}
	if job.Ready != "" {
		if cfgJSON, err = withReady(cfgJSON, job); err != nil {
			return nil, err
		}
	}
	keys, err := stepKeys(job.File, job.ContextDir)
	if err != nil {
		return nil, err
	}
	if job.Log == nil {
		job.Log = io.Discard
	}
	return &Plan{job: job, cfgJSON: cfgJSON, keys: keys}, nil
}

// Run runs plan p's steps through b and returns the template. A failing
// step's error names its line. The build sandbox is removed, even after
// ctx is cancelled, unless the build succeeded and it holds cached steps
// (cache.go).
func Run(ctx context.Context, b Backend, p *Plan) (*sandboxv1.Template, error) {
	job, df := p.job, p.job.File
	taken, err := b.TemplateTaken(ctx, job.Name)
	if err != nil {
		return nil, err
	}
	if taken {
		return nil, fmt.Errorf("template %s exists; delete it first (space template delete %s): the step cache outlives it, so the rebuild reruns only what changed", printable(job.Name), printable(job.Name))
	}
	cleanupCtx := context.WithoutCancel(ctx)
	c, _ := b.(Cache)
	var holders []Holder
	cached, from := 0, cacheEntry{}
	if c != nil {
		if holders, err = c.Holders(ctx); err != nil {
			return nil, fmt.Errorf("step cache: %w", err)
		}
		if !job.NoCache {
			cached, from = cachedPrefix(df.Steps, p.keys, cacheIndex(holdersOf(holders, job.Runtime)))
		}
	}
	id, err := buildSandbox(ctx, b, df.From, job, from)
	if err != nil {
		return nil, err
	}
	// The build sandbox becomes a cache holder once it holds a cached step
	// and the build succeeded; otherwise it is removed.
	holds, ok := false, false
	defer func() {
		if holds && ok {
			err := c.KeepHolder(cleanupCtx, id, cacheTTL)
			if err == nil {
				return
			}
			fmt.Fprintf(job.Log, "space: warning: step cache: holder %s: %v; removing it\n", id, err)
		}
		if err := b.DeleteSandbox(cleanupCtx, id); err != nil {
			fmt.Fprintf(job.Log, "space: warning: remove build sandbox %s: %v\n", id, err)
		}
	}()
	st := &buildState{env: map[string]string{}}
	total := len(df.Steps)
	for i, in := range df.Steps {
		if i < cached {
			fmt.Fprintf(job.Log, "step %d/%d: cached: %s\n", i+1, total, printable(stepLine(in)))
			st.apply(in)
			continue
		}
		fmt.Fprintf(job.Log, "step %d/%d: %s\n", i+1, total, printable(stepLine(in)))
		if err := runBuildStep(ctx, b, id, job, st, in); err != nil {
			return nil, &StepError{Index: i, Err: err}
		}
		if c != nil && changesFS(in) {
			if err := cacheStep(ctx, b, id, p.keys[i]); err != nil {
				return nil, err
			}
			holds = true
		}
	}
	if job.Ready != "" {
		fmt.Fprintf(job.Log, "ready check: %s\n", printable(job.Ready))
		if err := readyCheck(ctx, b, id, job, st, p.cfgJSON); err != nil {
			return nil, &StepError{Index: total, Err: err}
		}
	}
	t, err := finishBuild(ctx, cleanupCtx, b, id, job, p.cfgJSON)
	if err != nil {
		return nil, err
	}
	ok = true
	if holds {
		// The new holder counts among the kept.
		if _, err := deleteHolders(ctx, b, afterBuild(holders, job.Name, id)); err != nil {
			fmt.Fprintf(job.Log, "space: warning: %v\n", err)
		}
	}
	return t, nil
}

// buildSandbox is the build's sandbox, running: a fork of the holder of
// the last cached step from its snapshot, or a new sandbox from the FROM
// template.
func buildSandbox(ctx context.Context, b Backend, base string, job Job, from cacheEntry) (string, error) {
	if from.snapshot != "" {
		// The fork has its holder's lifetime; a build has its own.
		id, err := b.ForkSandbox(ctx, from.holder, from.snapshot, buildTimeout)
		if err != nil {
			return "", buildSandboxError(fmt.Sprintf("build sandbox from cached snapshot %s of %s", from.snapshot, from.holder), err)
		}
		return id, nil
	}
	id, err := b.CreateSandbox(ctx, sandboxv1.CreateSandboxRequest{
		Template: base, Runtime: job.Runtime, Timeout: buildTimeout,
		Metadata: map[string]string{CacheLabel: job.Name},
	})
	if err != nil {
		return "", buildSandboxError("build sandbox from "+printable(base), err)
	}
	return id, nil
}

// buildSandboxError is err of creating the build sandbox (what), which,
// when the tenant's quota refused it, says what a build counts in the
// quota: the server's message alone would not (a CLI shows only that).
func buildSandboxError(what string, err error) error {
	if !space.IsReason(err, "quota_exceeded") && !errors.Is(err, errdefs.ErrQuotaExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	msg := err.Error()
	var ae *space.APIError
	if errors.As(err, &ae) {
		msg = ae.Message
	}
	return &quotaError{msg: what + ": " + msg + "; a build runs one sandbox, which counts in the quota like any running sandbox (the step cache's holders are stopped and do not count)"}
}

// quotaError is a build refused by its tenant's quota.
type quotaError struct{ msg string }

func (e *quotaError) Error() string { return e.msg }

// Unwrap makes it errdefs.ErrQuotaExceeded (and ErrResourceExhausted).
func (e *quotaError) Unwrap() error { return errdefs.ErrQuotaExceeded }

// buildTimeout is a build sandbox's lifetime.
const buildTimeout = "2h"

// finishBuild writes the image config in build sandbox id, snapshots it and
// builds the template from that snapshot, which it then deletes.
func finishBuild(ctx, cleanupCtx context.Context, b Backend, id string, job Job, cfgJSON []byte) (*sandboxv1.Template, error) {
	if err := mkdirs(ctx, b, id, path.Dir(imagecfg.Path)); err != nil {
		return nil, err
	}
	if err := b.WriteFile(ctx, id, imagecfg.Path, strings.NewReader(string(cfgJSON))); err != nil {
		return nil, err
	}
	snapID, err := b.Snapshot(ctx, id, "")
	if snapID != "" {
		defer func() {
			if err := b.DeleteSnapshot(cleanupCtx, id, snapID); err != nil {
				fmt.Fprintf(job.Log, "space: warning: remove build snapshot %s: %v\n", snapID, err)
			}
		}()
	}
	if err != nil {
		return nil, err
	}
	return b.BuildTemplate(ctx, sandboxv1.BuildTemplateRequest{Name: job.Name, From: "snapshot:" + snapID, Egress: job.Egress})
}

// printable replaces control characters (terminal escapes, tabs, newlines)
// and invalid UTF-8 in text that goes to the build log with '?'.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// withReady adds job.Ready to the image config as its SpaceReadyCmd; a
// command the guest would refuse (too long, a NUL byte) is an error here.
func withReady(cfgJSON []byte, job Job) ([]byte, error) {
	c, err := imagecfg.Parse(cfgJSON)
	if err != nil {
		return nil, err
	}
	c.SpaceReadyCmd = job.Ready
	if job.ReadyTimeout > 0 {
		c.SpaceReadyTimeout = min(int((job.ReadyTimeout+time.Second-1)/time.Second), imagecfg.MaxReadyTimeout)
	}
	b, err := imagecfg.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("ready command: %w", err)
	}
	return b, nil
}
