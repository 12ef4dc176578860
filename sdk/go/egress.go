package space

import (
	"context"
	"fmt"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// GetEgress returns a sandbox's egress policy, normalised by the server.
func (c *Client) GetEgress(ctx context.Context, id string) (*sandboxv1.EgressPolicy, error) {
	return c.egressCall(ctx, http.MethodGet, id, nil, nil, "get egress policy of")
}

// SetEgress replaces a sandbox's egress policy and returns it as stored. The
// server also applies it to the sandbox's running or paused execution:
// connections already open keep the decision they got. An error with code
// sandboxv1.CodeUnavailable (see IsCode) means the policy is stored but the
// running execution could not take it: it still has the previous policy,
// and the new one applies at its next start; calling SetEgress again retries.
// A PUT carries the whole policy, so it is safe to send again.
func (c *Client) SetEgress(ctx context.Context, id string, policy sandboxv1.EgressPolicy, opts ...CallOption) (*sandboxv1.EgressPolicy, error) {
	return c.egressCall(ctx, http.MethodPut, id, policy, opts, "set egress policy of")
}

func (c *Client) egressCall(ctx context.Context, method, id string, in any, opts []CallOption, what string) (*sandboxv1.EgressPolicy, error) {
	p, err := sandboxPath(id, "/egress")
	if err != nil {
		return nil, fmt.Errorf("%s sandbox: %w", what, err)
	}
	var out sandboxv1.EgressPolicy
	if err := c.call(ctx, request{method: method, path: p, opts: opts}, in, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("%s sandbox %s: %w", what, id, err)
	}
	return &out, nil
}
