package imagebuild

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"
)

// Client is the Backend and Cache of a build over SPACE's public API
// through the Go SDK: the build does what its client's key may do, and
// nothing else.
type Client struct {
	C *space.Client
}

var (
	_ Backend = Client{}
	_ Cache   = Client{}
)

// TemplateTaken implements Backend.
func (c Client) TemplateTaken(ctx context.Context, name string) (bool, error) {
	list, err := c.C.ListTemplates(ctx)
	if err != nil {
		return false, err
	}
	for _, t := range list {
		if t.Name == name && (t.State == "ready" || t.State == "building") {
			return true, nil
		}
	}
	return false, nil
}

// CreateSandbox implements Backend.
func (c Client) CreateSandbox(ctx context.Context, req sandboxv1.CreateSandboxRequest) (string, error) {
	sb, err := c.C.CreateSandbox(ctx, req)
	if err != nil {
		return "", err
	}
	return sb.ID, c.running(ctx, sb)
}

// ForkSandbox implements Backend.
func (c Client) ForkSandbox(ctx context.Context, holder, snapshot, timeout string) (string, error) {
	sb, err := c.C.ForkSandbox(ctx, holder, sandboxv1.ForkRequest{Snapshot: snapshot})
	if err != nil {
		return "", err
	}
	if _, err := c.C.SetTimeout(ctx, sb.ID, timeout); err != nil {
		_ = c.C.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
		return "", fmt.Errorf("build sandbox %s: timeout: %w", sb.ID, err)
	}
	return sb.ID, c.running(ctx, sb)
}

// running waits until sb runs; a sandbox that does not is deleted.
func (c Client) running(ctx context.Context, sb *sandboxv1.Sandbox) error {
	if sb.State == sandboxv1.StateRunning {
		return nil
	}
	if _, err := c.C.WaitForState(ctx, sb.ID, sandboxv1.StateRunning); err != nil {
		_ = c.C.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
		return err
	}
	return nil
}

// DeleteSandbox implements Backend.
func (c Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.C.DeleteSandbox(ctx, id)
}

// Exec implements Backend with a streaming exec.
func (c Client) Exec(ctx context.Context, id string, start sandboxv1.ExecStart, stdout, stderr io.Writer) (int, error) {
	s, err := c.C.StartExec(ctx, id, start, space.StreamOptions{Stdout: stdout, Stderr: stderr})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	return s.Wait()
}

// WriteFile implements Backend.
func (c Client) WriteFile(ctx context.Context, id, path string, r io.Reader) error {
	return c.C.WriteFile(ctx, id, path, r)
}

// Snapshot implements Backend, polling the snapshot until it is ready.
func (c Client) Snapshot(ctx context.Context, id, name string) (string, error) {
	s, err := c.C.CreateSnapshot(ctx, id, sandboxv1.CreateSnapshotRequest{Kind: sandboxv1.SnapshotDisk, Name: name})
	if err != nil {
		return "", err
	}
	for s.State != "ready" {
		if s.State == "failed" {
			return s.ID, fmt.Errorf("snapshot %s of the build sandbox failed: %s", s.ID, printable(s.Reason))
		}
		select {
		case <-ctx.Done():
			return s.ID, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		list, err := c.C.ListSnapshots(ctx, id)
		if err != nil {
			return s.ID, err
		}
		for i := range list {
			if list[i].ID == s.ID {
				s = &list[i]
			}
		}
	}
	return s.ID, nil
}

// DeleteSnapshot implements Backend.
func (c Client) DeleteSnapshot(ctx context.Context, id, snapID string) error {
	return c.C.DeleteSnapshot(ctx, id, snapID)
}

// BuildTemplate implements Backend.
func (c Client) BuildTemplate(ctx context.Context, req sandboxv1.BuildTemplateRequest) (*sandboxv1.Template, error) {
	t, err := c.C.BuildTemplate(ctx, req)
	if err != nil {
		return nil, err
	}
	if t.State != "ready" {
		return c.C.WaitForTemplate(ctx, req.Name, nil)
	}
	return t, nil
}

// Holders implements Cache.
func (c Client) Holders(ctx context.Context) ([]Holder, error) {
	all, err := c.C.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	var out []Holder
	for _, sb := range all {
		tpl, ok := sb.Metadata[CacheLabel]
		if !ok || sb.State != sandboxv1.StateStopped {
			continue
		}
		snaps, err := c.C.ListSnapshots(ctx, sb.ID)
		if err != nil {
			return nil, fmt.Errorf("snapshots of %s: %w", sb.ID, err)
		}
		h := Holder{ID: sb.ID, Template: tpl, Runtime: sb.Runtime, Created: sb.CreatedAt, Snapshots: map[string]string{}}
		for _, s := range snaps {
			if s.State != "ready" || s.Kind != sandboxv1.SnapshotDisk {
				continue
			}
			for _, n := range s.Names {
				if strings.HasPrefix(n, CacheNamePrefix) {
					h.Snapshots[n] = s.ID
				}
			}
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// KeepHolder implements Cache.
func (c Client) KeepHolder(ctx context.Context, id, ttl string) error {
	if _, err := c.C.SetTimeout(ctx, id, ttl); err != nil {
		return fmt.Errorf("timeout: %w", err)
	}
	if _, err := c.C.StopSandbox(ctx, id); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	if _, err := c.C.WaitForState(ctx, id, sandboxv1.StateStopped); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}
