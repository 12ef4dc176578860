package sandboxv1

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// openAPIDoc is the part of an OpenAPI document the tests read.
type openAPIDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		} `json:"schemas"`
	} `json:"components"`
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	return doc
}

// TestOpenAPIRoutes checks that every route of SPEC.md and of this milestone is
// in the document with its method.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	routes := []string{
		"POST /v1/sandboxes", "GET /v1/sandboxes",
		"GET /v1/sandboxes/{id}", "DELETE /v1/sandboxes/{id}",
		"POST /v1/sandboxes/{id}/pause", "POST /v1/sandboxes/{id}/resume",
		"POST /v1/sandboxes/{id}/hibernate", "POST /v1/sandboxes/{id}/restore",
		"POST /v1/sandboxes/{id}/stop", "POST /v1/sandboxes/{id}/start",
		"POST /v1/sandboxes/{id}/fork", "POST /v1/sandboxes/{id}/rollback",
		"GET /v1/sandboxes/{id}/snapshots", "POST /v1/sandboxes/{id}/snapshots", "GET /v1/sandboxes/{id}/events",
		"GET /v1/sandboxes/{id}/metrics",
		"POST /v1/sandboxes/{id}/ports", "GET /v1/sandboxes/{id}/ports", "DELETE /v1/sandboxes/{id}/ports/{port}",
		"GET /v1/sandboxes/{id}/ports/{port}/proxy/{path}", "POST /v1/sandboxes/{id}/ports/{port}/proxy/{path}",
		"GET /v1/sandboxes/{id}/ports/{port}/tcp",
		"GET /v1/sandboxes/{id}/egress", "PUT /v1/sandboxes/{id}/egress",
		"POST /v1/sandboxes/{id}/exec", "GET /v1/sandboxes/{id}/exec",
		"GET /v1/sandboxes/{id}/files", "PUT /v1/sandboxes/{id}/files", "DELETE /v1/sandboxes/{id}/files",
		"GET /v1/sandboxes/{id}/files/list", "GET /v1/sandboxes/{id}/files/stat", "POST /v1/sandboxes/{id}/files/mkdir",
		"POST /v1/sandboxes/{id}/files/move", "GET /v1/sandboxes/{id}/files/watch",
		"GET /v1/templates", "POST /v1/templates", "DELETE /v1/templates/{name}",
		"GET /v1/tenants", "POST /v1/tenants", "DELETE /v1/tenants/{id}", "PUT /v1/tenants/{id}/quota",
		"GET /v1/keys", "POST /v1/keys", "DELETE /v1/keys/{id}",
		"GET /openapi.json", "GET /healthz", "GET /readyz", "GET /metrics",
		"POST /v1/credentials", "GET /v1/credentials", "GET /v1/credentials/{id}", "DELETE /v1/credentials/{id}",
		"GET /v1/credentials/audit", "GET /v1/sandboxes/{id}/ca.pem",
	}
	for _, r := range routes {
		method, path, _ := strings.Cut(r, " ")
		ops, ok := doc.Paths[path]
		if !ok {
			t.Errorf("%s: path missing", r)
			continue
		}
		if _, ok := ops[strings.ToLower(method)]; !ok {
			t.Errorf("%s: method missing", r)
		}
	}
}

// TestOpenAPIRefsResolve checks that every $ref names a component that exists.
func TestOpenAPIRefsResolve(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(OpenAPI, &root); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if !resolves(root, ref) {
					t.Errorf("$ref %q does not resolve", ref)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(root)
}

// resolves follows a local JSON pointer (#/a/b) through root.
func resolves(root map[string]any, ref string) bool {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	var cur any = root
	for _, part := range strings.Split(p, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}

// TestOpenAPISchemasMatchTypes checks that each schema has exactly the JSON
// fields of its Go type, and requires exactly the fields without omitempty.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	doc := loadOpenAPI(t)
	types := map[string]any{
		"Error": Error{}, "CreateSandboxRequest": CreateSandboxRequest{}, "Sandbox": Sandbox{},
		"SandboxList": SandboxList{}, "ExecRequest": ExecRequest{}, "ExecResult": ExecResult{},
		"ExecStart": ExecStart{}, "Process": Process{}, "ProcessList": ProcessList{}, "ExecMessage": ExecMessage{}, "FileEntry": FileEntry{},
		"FileList": FileList{}, "FileEvent": FileEvent{}, "Template": Template{},
		"TemplateList": TemplateList{}, "BuildTemplateRequest": BuildTemplateRequest{},
		"Tenant": Tenant{}, "TenantList": TenantList{}, "CreateTenantRequest": CreateTenantRequest{},
		"CreateTenantResponse": CreateTenantResponse{}, "Quota": Quota{}, "Usage": Usage{}, "APIKey": APIKey{}, "APIKeyList": APIKeyList{},
		"CreateKeyRequest": CreateKeyRequest{}, "CreateKeyResponse": CreateKeyResponse{},
		"Snapshot": Snapshot{}, "SnapshotList": SnapshotList{}, "CreateSnapshotRequest": CreateSnapshotRequest{},
		"ForkRequest": ForkRequest{}, "RollbackRequest": RollbackRequest{}, "RestoreRequest": RestoreRequest{},
		"ExposePortRequest": ExposePortRequest{}, "ServicePort": ServicePort{}, "ServicePortList": ServicePortList{},
		"Event": Event{}, "Progress": Progress{}, "EventList": EventList{}, "Metric": Metric{}, "MetricList": MetricList{}, "EncryptionKey": EncryptionKey{}, "EncryptionKeyList": EncryptionKeyList{},
		"Node": Node{}, "NodeList": NodeList{}, "WarmPoolStatus": WarmPoolStatus{}, "SetTimeoutRequest": SetTimeoutRequest{},
		"SigningKey": SigningKey{}, "SigningKeyList": SigningKeyList{},
		"EgressPolicy": EgressPolicy{}, "EgressRules": EgressRules{},
		"CredentialInjection": CredentialInjection{}, "CreateCredentialRequest": CreateCredentialRequest{},
		"CredentialScope": CredentialScope{}, "Credential": Credential{}, "CredentialList": CredentialList{},
		"CredentialAuditEntry": CredentialAuditEntry{}, "CredentialAuditList": CredentialAuditList{},
		"Readiness": Readiness{},
	}
	for name, v := range types {
		t.Run(name, func(t *testing.T) {
			s, ok := doc.Components.Schemas[name]
			if !ok {
				t.Fatalf("schema %s missing", name)
			}
			fields, required := jsonFields(reflect.TypeOf(v))
			var got []string
			for p := range s.Properties {
				got = append(got, p)
			}
			sort.Strings(got)
			if !slices.Equal(got, fields) {
				t.Errorf("properties = %v, want %v", got, fields)
			}
			gotReq := slices.Clone(s.Required)
			sort.Strings(gotReq)
			if !slices.Equal(gotReq, required) {
				t.Errorf("required = %v, want %v (fields without omitempty or omitzero)", gotReq, required)
			}
		})
	}
}

// jsonFields returns the sorted JSON names of t's fields and those without omitempty.
func jsonFields(t reflect.Type) (fields, required []string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields = append(fields, name)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			required = append(required, name)
		}
	}
	sort.Strings(fields)
	sort.Strings(required)
	return fields, required
}
