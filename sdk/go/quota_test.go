package space

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

func TestSetTenantQuotaAndRefusal(t *testing.T) {
	var got sandboxv1.Quota
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/tenants/{id}/quota", func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil || r.PathValue("id") != "t-1" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(sandboxv1.Tenant{ID: "t-1", Quota: got, Usage: sandboxv1.Usage{Sandboxes: 1}})
	})
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_ = json.NewEncoder(w).Encode(sandboxv1.Error{Code: sandboxv1.CodeResourceExhausted, Message: "tenant t-1 is over its quota"})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := NewClient(srv.URL, "sk-test")
	want := sandboxv1.Quota{MaxSandboxes: 2, MaxCPUs: 4}
	tn, err := c.SetTenantQuota(t.Context(), "t-1", want)
	if err != nil || got != want || tn.Quota != want || tn.Usage.Sandboxes != 1 {
		t.Fatalf("SetTenantQuota = %+v, %v; server got %+v; want %+v", tn, err, got, want)
	}
	if _, err := c.SetTenantQuota(t.Context(), "../x", want); err == nil {
		t.Error("SetTenantQuota with a path in the id: no error")
	}
	_, err = c.CreateSandbox(t.Context(), sandboxv1.CreateSandboxRequest{Template: "minimal"})
	if !IsQuotaExceeded(err) {
		t.Errorf("create refused by quota: err = %v; IsQuotaExceeded false", err)
	}
	if IsQuotaExceeded(&APIError{Status: 429, Code: sandboxv1.CodeRateLimited}) {
		t.Error("a rate limit is reported as a quota refusal")
	}
}
