package space

import (
	"context"
	"fmt"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// Exec runs a command in a sandbox to completion and returns its exit code and
// captured output. A command that runs and fails is not an error: check ExitCode.
func (c *Client) Exec(ctx context.Context, id string, req sandboxv1.ExecRequest, opts ...CallOption) (*sandboxv1.ExecResult, error) {
	if len(req.Cmd) == 0 {
		return nil, fmt.Errorf("exec in sandbox %s: command is empty", id)
	}
	p, err := sandboxPath(id, "/exec")
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	var res sandboxv1.ExecResult
	if err := c.call(ctx, request{method: http.MethodPost, path: p, opts: opts}, req, &res, maxExecBody); err != nil {
		return nil, fmt.Errorf("exec %q in sandbox %s: %w", req.Cmd[0], id, err)
	}
	return &res, nil
}
