package sandboxv1

import "time"

// CredentialInjection says how the gateway adds a credential's secret to a
// request: Method "header" sets the header Name to the secret, "basic" sets
// "Authorization: Basic" from a secret "user:password" (Name empty),
// "query" sets the URL query parameter Name, "headers" sets each of the
// comma-joined header names in Name to its value (the secret's values in
// the same order, newline-joined).
type CredentialInjection struct {
	Method string `json:"method"`
	Name   string `json:"name,omitempty"`
}

// CreateCredentialRequest is the body of POST /v1/credentials. Secret is
// write-only: no response ever contains it.
type CreateCredentialRequest struct {
	// Name is a label ("github-token"): printable ASCII, 1 to 128 bytes.
	Name string `json:"name"`
	// Secret is the value injected; it never enters the sandbox.
	Secret    string              `json:"secret"`
	Injection CredentialInjection `json:"injection"`
	// AllowedHosts are the only hosts the secret is sent to: exact names
	// or IP addresses, or "*.example.com" for any name below example.com.
	AllowedHosts []string `json:"allowed_hosts"`
	// ExpiresAt (RFC 3339) is when the credential stops being injected;
	// absent: never.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// RateLimit is the most injections per minute; 0 or absent: unlimited.
	RateLimit int `json:"rate_limit,omitempty"`
	// Project narrows the credential to the sandboxes of one project;
	// Sandbox to one sandbox of the caller's tenant. Neither: every sandbox
	// of the tenant. The most specific credential for a host wins.
	Project string `json:"project,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
	// Tenant is for the admin key only: create in another tenant.
	Tenant string `json:"tenant,omitempty"`
}

// CredentialScope says which sandboxes may use a credential.
type CredentialScope struct {
	Tenant  string `json:"tenant"`
	Project string `json:"project,omitempty"`
	Sandbox string `json:"sandbox,omitempty"`
}

// Credential is what the API reports of a credential: its metadata, never
// its secret.
type Credential struct {
	ID           string              `json:"id"`
	Name         string              `json:"name"`
	Scope        CredentialScope     `json:"scope"`
	Injection    CredentialInjection `json:"injection"`
	AllowedHosts []string            `json:"allowed_hosts"`
	ExpiresAt    *time.Time          `json:"expires_at,omitempty"`
	RateLimit    int                 `json:"rate_limit,omitempty"`
	CreatedAt    time.Time           `json:"created_at"`
}

// CredentialList is the body of GET /v1/credentials.
type CredentialList struct {
	Credentials []Credential `json:"credentials"`
}

// CredentialAuditEntry is one attempt by a sandbox's gateway to use a
// credential: who (tenant, project, sandbox, execution), which host, when,
// and whether it was handed out and why. An entry of Kind "redaction"
// records instead that the gateway removed the credential's secret from a
// response from Host: Where ("header" or "body") and Count times.
type CredentialAuditEntry struct {
	Kind         string    `json:"kind,omitempty"`
	Time         time.Time `json:"time"`
	Tenant       string    `json:"tenant"`
	Project      string    `json:"project,omitempty"`
	Sandbox      string    `json:"sandbox,omitempty"`
	ExecutionID  string    `json:"execution_id,omitempty"`
	Host         string    `json:"host"`
	CredentialID string    `json:"credential_id,omitempty"`
	Allowed      bool      `json:"allowed"`
	Reason       string    `json:"reason"`
	Where        string    `json:"where,omitempty"`
	Count        int       `json:"count,omitempty"`
}

// CredentialAuditList is the body of GET /v1/credentials/audit, newest
// first.
type CredentialAuditList struct {
	Entries []CredentialAuditEntry `json:"entries"`
}
