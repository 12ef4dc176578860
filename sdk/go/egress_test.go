package space

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

func TestEgressCalls(t *testing.T) {
	stored := sandboxv1.EgressPolicy{AllowInternet: true}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/egress", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "sb1" {
			writeErr(w, http.StatusNotFound, sandboxv1.CodeNotFound, "no such sandbox")
			return
		}
		writeJSON(w, http.StatusOK, stored)
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/egress", func(w http.ResponseWriter, r *http.Request) {
		var p sandboxv1.EgressPolicy
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			writeErr(w, http.StatusBadRequest, sandboxv1.CodeInvalidArgument, err.Error())
			return
		}
		stored = p
		if len(p.Deny.Ports) > 0 {
			writeErr(w, http.StatusServiceUnavailable, sandboxv1.CodeUnavailable, "stored; applies at the next start")
			return
		}
		writeJSON(w, http.StatusOK, p)
	})
	c := newTestServer(t, mux)
	ctx := context.Background()
	if p, err := c.GetEgress(ctx, "sb1"); err != nil || !p.AllowInternet {
		t.Fatalf("GetEgress = %+v, %v", p, err)
	}
	want := sandboxv1.EgressPolicy{Allow: sandboxv1.EgressRules{Domains: []string{"pypi.org"}, Ports: []string{"443"}}}
	got, err := c.SetEgress(ctx, "sb1", want)
	if err != nil || !reflect.DeepEqual(*got, want) || !reflect.DeepEqual(stored, want) {
		t.Fatalf("SetEgress = %+v, %v; server stored %+v; want %+v", got, err, stored, want)
	}
	if _, err := c.SetEgress(ctx, "sb1", sandboxv1.EgressPolicy{Deny: sandboxv1.EgressRules{Ports: []string{"25"}}}); !IsCode(err, sandboxv1.CodeUnavailable) {
		t.Errorf("SetEgress with the push failing = %v, want code unavailable", err)
	}
	if _, err := c.GetEgress(ctx, "other"); !IsNotFound(err) {
		t.Errorf("GetEgress of a missing sandbox = %v, want not found", err)
	}
	if _, err := c.GetEgress(ctx, "a/b"); err == nil {
		t.Error("GetEgress accepted an id with a slash")
	}
}
