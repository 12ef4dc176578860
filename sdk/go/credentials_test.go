package space

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

func TestCredentialCalls(t *testing.T) {
	var sent sandboxv1.CreateCredentialRequest
	var auditQuery, deleted string
	cred := sandboxv1.Credential{ID: "cr-1", Name: "gh", Scope: sandboxv1.CredentialScope{Tenant: "t-1"},
		Injection: sandboxv1.CredentialInjection{Method: "header", Name: "Authorization"}, AllowedHosts: []string{"api.github.com"}, CreatedAt: time.Unix(1, 0).UTC()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/credentials", func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&sent); err != nil {
			writeErr(w, http.StatusBadRequest, sandboxv1.CodeInvalidArgument, err.Error())
			return
		}
		writeJSON(w, http.StatusCreated, cred)
	})
	mux.HandleFunc("GET /v1/credentials", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, sandboxv1.CredentialList{Credentials: []sandboxv1.Credential{cred}})
	})
	mux.HandleFunc("GET /v1/credentials/audit", func(w http.ResponseWriter, r *http.Request) {
		auditQuery = r.URL.RawQuery
		writeJSON(w, http.StatusOK, sandboxv1.CredentialAuditList{Entries: []sandboxv1.CredentialAuditEntry{{Host: "api.github.com", Allowed: true}}})
	})
	mux.HandleFunc("GET /v1/credentials/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "cr-1" {
			writeErr(w, http.StatusNotFound, sandboxv1.CodeNotFound, "no such credential")
			return
		}
		writeJSON(w, http.StatusOK, cred)
	})
	mux.HandleFunc("DELETE /v1/credentials/{id}", func(w http.ResponseWriter, r *http.Request) {
		deleted = r.PathValue("id")
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/ca.pem", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"))
	})
	c := newTestServer(t, mux)
	ctx := context.Background()

	got, err := c.CreateCredential(ctx, sandboxv1.CreateCredentialRequest{Name: "gh", Secret: "tok", Injection: cred.Injection, AllowedHosts: cred.AllowedHosts})
	if err != nil || got.ID != "cr-1" || sent.Secret != "tok" || sent.Name != "gh" {
		t.Fatalf("CreateCredential = %+v, %v; server got %+v", got, err, sent)
	}
	if list, err := c.ListCredentials(ctx); err != nil || len(list) != 1 || list[0].ID != "cr-1" {
		t.Errorf("ListCredentials = %+v, %v", list, err)
	}
	if g, err := c.GetCredential(ctx, "cr-1"); err != nil || g.Name != "gh" {
		t.Errorf("GetCredential = %+v, %v", g, err)
	}
	if _, err := c.GetCredential(ctx, "cr-2"); !IsNotFound(err) {
		t.Errorf("GetCredential of a missing one = %v", err)
	}
	if err := c.DeleteCredential(ctx, "cr-1"); err != nil || deleted != "cr-1" {
		t.Errorf("DeleteCredential = %v, server deleted %q", err, deleted)
	}
	if err := c.DeleteCredential(ctx, ""); err == nil {
		t.Error("DeleteCredential accepted an empty id")
	}
	entries, err := c.CredentialAudit(ctx, CredentialAuditQuery{Sandbox: "sb1", Limit: 7})
	if err != nil || len(entries) != 1 || auditQuery != "limit=7&sandbox=sb1" {
		t.Errorf("CredentialAudit = %+v, %v; query %q", entries, err, auditQuery)
	}
	if pemText, err := c.SandboxCA(ctx, "sb1"); err != nil || !strings.HasPrefix(pemText, "-----BEGIN CERTIFICATE-----") {
		t.Errorf("SandboxCA = %q, %v", pemText, err)
	}
}
