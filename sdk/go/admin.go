package space

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// Template states as the API reports them.
const (
	TemplateBuilding = "building"
	TemplateReady    = "ready"
	TemplateFailed   = "failed"
)

// ListTemplates lists the templates.
func (c *Client) ListTemplates(ctx context.Context) ([]sandboxv1.Template, error) {
	var list sandboxv1.TemplateList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/templates"}, nil, &list, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return list.Templates, nil
}

// BuildTemplate starts building a template; WaitForTemplate follows the build.
func (c *Client) BuildTemplate(ctx context.Context, req sandboxv1.BuildTemplateRequest, opts ...CallOption) (*sandboxv1.Template, error) {
	var t sandboxv1.Template
	if err := c.call(ctx, request{method: http.MethodPost, path: "/v1/templates", opts: opts}, req, &t, maxJSONBody); err != nil {
		return nil, fmt.Errorf("build template %s from %s: %w", req.Name, req.From, err)
	}
	return &t, nil
}

// DeleteTemplate deletes a template.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	seg, err := pathSegment("template name", name)
	if err != nil {
		return fmt.Errorf("delete template: %w", err)
	}
	if err := c.call(ctx, request{method: http.MethodDelete, path: "/v1/templates/" + seg}, nil, nil, 0); err != nil {
		return fmt.Errorf("delete template %s: %w", name, err)
	}
	return nil
}

// WaitForTemplate polls the template list until the named template is ready and
// returns it; it fails when the build fails, the template disappears, or ctx ends.
// progress, when not nil, is called with every polled state.
func (c *Client) WaitForTemplate(ctx context.Context, name string, progress func(sandboxv1.Template)) (*sandboxv1.Template, error) {
	var p poller
	for {
		list, err := c.ListTemplates(ctx)
		if err != nil {
			return nil, fmt.Errorf("wait for template %s: %w", name, err)
		}
		t, ok := findTemplate(list, name)
		if !ok {
			return nil, fmt.Errorf("wait for template %s: the server no longer lists it", name)
		}
		if progress != nil {
			progress(t)
		}
		switch t.State {
		case TemplateReady:
			return &t, nil
		case TemplateFailed:
			return &t, fmt.Errorf("template %s failed to build: %s", name, cleanText(t.Reason, 1024))
		}
		if err := p.wait(ctx); err != nil {
			return &t, fmt.Errorf("wait for template %s (now %s): %w", name, t.State, err)
		}
	}
}

// findTemplate returns the template called name in list.
func findTemplate(list []sandboxv1.Template, name string) (sandboxv1.Template, bool) {
	for _, t := range list {
		if t.Name == name {
			return t, true
		}
	}
	return sandboxv1.Template{}, false
}

// ListTenants lists the tenants (admin key).
func (c *Client) ListTenants(ctx context.Context) ([]sandboxv1.Tenant, error) {
	var list sandboxv1.TenantList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/tenants"}, nil, &list, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return list.Tenants, nil
}

// ListNodes lists the registered nodes with their capacity, liveness and
// warm pools (admin key).
func (c *Client) ListNodes(ctx context.Context) ([]sandboxv1.Node, error) {
	var list sandboxv1.NodeList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/nodes"}, nil, &list, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return list.Nodes, nil
}

// DrainNode marks a node draining (admin key): the scheduler places
// nothing more on it and the control plane moves its running and paused
// sandboxes to other nodes by hibernate and restore. The answer counts
// the sandboxes still on it and names the stopped ones whose disk lives
// only there.
func (c *Client) DrainNode(ctx context.Context, id string) (*sandboxv1.Node, error) {
	return c.setNodeState(ctx, id, "drain")
}

// UndrainNode returns a draining node to ready (admin key).
func (c *Client) UndrainNode(ctx context.Context, id string) (*sandboxv1.Node, error) {
	return c.setNodeState(ctx, id, "undrain")
}

func (c *Client) setNodeState(ctx context.Context, id, verb string) (*sandboxv1.Node, error) {
	seg, err := pathSegment("node id", id)
	if err != nil {
		return nil, err
	}
	var out sandboxv1.Node
	if err := c.call(ctx, request{method: http.MethodPost, path: "/v1/nodes/" + seg + "/" + verb}, nil, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("%s node %s: %w", verb, id, err)
	}
	return &out, nil
}

// CreateTenant creates a tenant and its first API key, which the answer carries
// and the server never shows again (admin key).
func (c *Client) CreateTenant(ctx context.Context, name string, opts ...CallOption) (*sandboxv1.CreateTenantResponse, error) {
	var out sandboxv1.CreateTenantResponse
	r := request{method: http.MethodPost, path: "/v1/tenants", opts: opts}
	if err := c.call(ctx, r, sandboxv1.CreateTenantRequest{Name: name}, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("create tenant %s: %w", name, err)
	}
	return &out, nil
}

// DeleteTenant deletes a tenant (admin key).
func (c *Client) DeleteTenant(ctx context.Context, id string) error {
	seg, err := pathSegment("tenant id", id)
	if err != nil {
		return fmt.Errorf("delete tenant: %w", err)
	}
	if err := c.call(ctx, request{method: http.MethodDelete, path: "/v1/tenants/" + seg}, nil, nil, 0); err != nil {
		return fmt.Errorf("delete tenant %s: %w", id, err)
	}
	return nil
}

// SetTenantQuota replaces a tenant's quota (admin key) and returns the
// tenant with its quota and usage. A zero limit is unlimited; lowering a
// quota stops nothing, it refuses what would start.
func (c *Client) SetTenantQuota(ctx context.Context, id string, q sandboxv1.Quota) (*sandboxv1.Tenant, error) {
	seg, err := pathSegment("tenant id", id)
	if err != nil {
		return nil, fmt.Errorf("set tenant quota: %w", err)
	}
	var out sandboxv1.Tenant
	if err := c.call(ctx, request{method: http.MethodPut, path: "/v1/tenants/" + seg + "/quota"}, q, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("set quota of tenant %s: %w", id, err)
	}
	return &out, nil
}

// IsQuotaExceeded reports whether err is the server's refusal of something
// that would take the tenant past its quota (429 resource_exhausted): delete
// or hibernate a sandbox, or have an admin raise the quota, and try again.
func IsQuotaExceeded(err error) bool { return IsCode(err, sandboxv1.CodeResourceExhausted) }

// ListKeys lists API keys, without their secrets.
func (c *Client) ListKeys(ctx context.Context) ([]sandboxv1.APIKey, error) {
	var list sandboxv1.APIKeyList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/keys"}, nil, &list, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return list.Keys, nil
}

// CreateKey creates an API key; the answer carries its secret, shown only once.
func (c *Client) CreateKey(ctx context.Context, req sandboxv1.CreateKeyRequest, opts ...CallOption) (*sandboxv1.CreateKeyResponse, error) {
	var out sandboxv1.CreateKeyResponse
	if err := c.call(ctx, request{method: http.MethodPost, path: "/v1/keys", opts: opts}, req, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("create key: %w", err)
	}
	return &out, nil
}

// RevokeKey revokes an API key; it is refused from then on.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	seg, err := pathSegment("key id", id)
	if err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	if err := c.call(ctx, request{method: http.MethodDelete, path: "/v1/keys/" + seg}, nil, nil, 0); err != nil {
		return fmt.Errorf("revoke key %s: %w", id, err)
	}
	return nil
}

// ListEncryptionKeys lists a tenant's encryption keys (admin key).
func (c *Client) ListEncryptionKeys(ctx context.Context, tenant string) ([]sandboxv1.EncryptionKey, error) {
	seg, err := pathSegment("tenant id", tenant)
	if err != nil {
		return nil, fmt.Errorf("list encryption keys: %w", err)
	}
	var out sandboxv1.EncryptionKeyList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/tenants/" + seg + "/encryption-keys"}, nil, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list encryption keys of tenant %s: %w", tenant, err)
	}
	return out.Keys, nil
}

// RevokeEncryptionKey revokes a tenant's encryption key (admin key): what it
// protects in object storage can no longer be decrypted.
func (c *Client) RevokeEncryptionKey(ctx context.Context, tenant, key string) error {
	seg, err := pathSegment("tenant id", tenant)
	if err != nil {
		return fmt.Errorf("revoke encryption key: %w", err)
	}
	kseg, err := pathSegment("key id", key)
	if err != nil {
		return fmt.Errorf("revoke encryption key: %w", err)
	}
	if err := c.call(ctx, request{method: http.MethodDelete, path: "/v1/tenants/" + seg + "/encryption-keys/" + kseg}, nil, nil, 0); err != nil {
		return fmt.Errorf("revoke encryption key %s of tenant %s: %w", key, tenant, err)
	}
	return nil
}

// ListSigningKeys lists the control plane's capability signing keys (admin key).
func (c *Client) ListSigningKeys(ctx context.Context) (*sandboxv1.SigningKeyList, error) {
	var out sandboxv1.SigningKeyList
	if err := c.call(ctx, request{method: http.MethodGet, path: "/v1/signing-keys"}, nil, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("list signing keys: %w", err)
	}
	return &out, nil
}

// RotateSigningKey makes a new capability signing key (admin key) and returns it.
func (c *Client) RotateSigningKey(ctx context.Context) (*sandboxv1.SigningKey, error) {
	var out sandboxv1.SigningKey
	if err := c.call(ctx, request{method: http.MethodPost, path: "/v1/signing-keys/rotate"}, nil, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("rotate signing key: %w", err)
	}
	return &out, nil
}

// SetTemplateEgress replaces a template's default egress policy (admin);
// nil removes it, so the server's default applies to new sandboxes again.
func (c *Client) SetTemplateEgress(ctx context.Context, name string, policy *sandboxv1.EgressPolicy) (*sandboxv1.Template, error) {
	seg, err := pathSegment("template name", name)
	if err != nil {
		return nil, fmt.Errorf("set template egress: %w", err)
	}
	var body any = json.RawMessage("null")
	if policy != nil {
		body = policy
	}
	var out sandboxv1.Template
	if err := c.call(ctx, request{method: http.MethodPut, path: "/v1/templates/" + seg + "/egress"}, body, &out, maxJSONBody); err != nil {
		return nil, fmt.Errorf("set template %s egress: %w", name, err)
	}
	return &out, nil
}
