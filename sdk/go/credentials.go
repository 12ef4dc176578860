package space

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// CreateCredential stores a credential that the gateway injects into the
// requests of the sandboxes in its scope to its allowed hosts, without the
// secret ever entering a sandbox. The secret is write-only: the answer, and
// every later read, carries the metadata only.
func (c *Client) CreateCredential(ctx context.Context, req sandboxv1.CreateCredentialRequest, opts ...CallOption) (*sandboxv1.Credential, error) {
	var out sandboxv1.Credential
	if err := c.call(ctx, request{method: http.MethodPost, path: "/v1/credentials", opts: opts}, req, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("create credential %q: %w", req.Name, err)
	}
	return &out, nil
}

// ListCredentials lists the caller's credentials (metadata only).
func (c *Client) ListCredentials(ctx context.Context) ([]sandboxv1.Credential, error) {
	var list sandboxv1.CredentialList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/credentials"}, nil, &list, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list credentials: %w", err)
	}
	return list.Credentials, nil
}

// GetCredential returns one credential's metadata.
func (c *Client) GetCredential(ctx context.Context, id string) (*sandboxv1.Credential, error) {
	seg, err := pathSegment("credential id", id)
	if err != nil {
		return nil, fmt.Errorf("get credential: %w", err)
	}
	var out sandboxv1.Credential
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/credentials/" + seg}, nil, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("get credential %s: %w", id, err)
	}
	return &out, nil
}

// DeleteCredential deletes a credential: it is injected no more.
func (c *Client) DeleteCredential(ctx context.Context, id string) error {
	seg, err := pathSegment("credential id", id)
	if err != nil {
		return fmt.Errorf("delete credential: %w", err)
	}
	if err := c.call(ctx, request{method: http.MethodDelete, path: "/v1/credentials/" + seg}, nil, nil, 0); err != nil {
		return fmt.Errorf("delete credential %s: %w", id, err)
	}
	return nil
}

// CredentialAuditQuery selects audit entries; empty fields match all, and
// Limit 0 is the server's default (100; at most 1000).
type CredentialAuditQuery struct {
	Sandbox    string
	Credential string
	Limit      int
}

// CredentialAudit returns the caller's credential audit entries, newest
// first: every attempt of a sandbox's gateway to obtain a credential.
func (c *Client) CredentialAudit(ctx context.Context, q CredentialAuditQuery) ([]sandboxv1.CredentialAuditEntry, error) {
	v := url.Values{}
	if q.Sandbox != "" {
		v.Set("sandbox", q.Sandbox)
	}
	if q.Credential != "" {
		v.Set("credential", q.Credential)
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var list sandboxv1.CredentialAuditList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/credentials/audit", query: v}, nil, &list, maxJSONBody); err != nil {
		return nil, fmt.Errorf("credential audit: %w", err)
	}
	return list.Entries, nil
}

// SandboxCA returns the PEM certificate of the interception CA a sandbox
// trusts.
func (c *Client) SandboxCA(ctx context.Context, id string) (string, error) {
	p, err := sandboxPath(id, "/ca.pem")
	if err != nil {
		return "", fmt.Errorf("sandbox CA: %w", err)
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: p})
	if err != nil {
		return "", fmt.Errorf("sandbox %s CA: %w", id, err)
	}
	defer resp.Body.Close()
	const maxCA = 64 << 10
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCA+1))
	if err != nil {
		return "", fmt.Errorf("sandbox %s CA: %w", id, err)
	}
	if len(b) > maxCA {
		return "", fmt.Errorf("sandbox %s CA: answer is larger than %d bytes", id, maxCA)
	}
	return string(b), nil
}
