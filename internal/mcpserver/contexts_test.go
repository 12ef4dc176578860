package mcpserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// TestCodeContextTools: each tool sends its route with the key and the
// arguments, and answers what the API gave.
func TestCodeContextTools(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	var created []sandboxv1.CodeContextRequest
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes/{id}/code/contexts", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.CodeContextRequest
		json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		created = append(created, req)
		mu.Unlock()
		json.NewEncoder(w).Encode(sandboxv1.CodeContext{ID: "ctx-1", Language: req.Language, Cwd: req.Cwd})
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}/code/contexts", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(sandboxv1.CodeContextList{Contexts: []sandboxv1.CodeContext{{ID: "python", Language: "python", Cwd: "/home/user"}, {ID: "ctx-1", Language: "bash", Cwd: "/tmp"}}})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/code/contexts/{ctx}/restart", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}/code/contexts/{ctx}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("ctx") != "ctx-1" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(map[string]string{"code": "not_found", "message": "code context " + r.PathValue("ctx") + " not found"})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Method+" "+r.URL.Path+" "+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cs := connect(t, Config{APIURL: srv.URL, Key: "space_k"})

	decode := func(t *testing.T, name string, args map[string]any, into any) {
		t.Helper()
		res := call(t, cs, name, args)
		if res.IsError {
			t.Fatalf("%s: %s", name, text(res))
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v in %s", name, err, b)
		}
	}
	var cc CodeContext
	decode(t, "code_context_create", map[string]any{"id": "sb1", "language": "bash", "cwd": "/tmp"}, &cc)
	if cc != (CodeContext{ID: "ctx-1", Language: "bash", Cwd: "/tmp"}) || created[0] != (sandboxv1.CodeContextRequest{Language: "bash", Cwd: "/tmp"}) {
		t.Fatalf("create: got %+v after request %+v", cc, created[0])
	}
	var list CodeContextList
	decode(t, "code_context_list", map[string]any{"id": "sb1"}, &list)
	if got := len(list.Contexts); got != 2 || list.Contexts[1].ID != "ctx-1" {
		t.Fatalf("list: got %+v", list)
	}
	var done ContextDone
	decode(t, "code_context_restart", map[string]any{"id": "sb1", "context": "ctx-1"}, &done)
	decode(t, "code_context_delete", map[string]any{"id": "sb1", "context": "ctx-1"}, &done)
	if done.Context != "ctx-1" {
		t.Fatalf("delete: got %+v", done)
	}
	res := call(t, cs, "code_context_delete", map[string]any{"id": "sb1", "context": "gone"})
	if !res.IsError || text(res) != "not_found: code context gone not found" {
		t.Fatalf("delete of a missing context: %v %q", res.IsError, text(res))
	}
	want := []string{
		"POST /v1/sandboxes/sb1/code/contexts space_k",
		"GET /v1/sandboxes/sb1/code/contexts space_k",
		"POST /v1/sandboxes/sb1/code/contexts/ctx-1/restart space_k",
		"DELETE /v1/sandboxes/sb1/code/contexts/ctx-1 space_k",
		"DELETE /v1/sandboxes/sb1/code/contexts/gone space_k",
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(sent, want) {
		t.Fatalf("sent\n%s\nwant\n%s", strings.Join(sent, "\n"), strings.Join(want, "\n"))
	}
}
