package space

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"unicode"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

const testKey = "sk-test"

// newTestServer serves mux behind a check of the API key and returns a client of it.
func newTestServer(t *testing.T, mux *http.ServeMux) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testKey {
			writeErr(w, http.StatusUnauthorized, sandboxv1.CodeUnauthenticated, "bad key")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return NewClient(srv.URL+"/", testKey)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, sandboxv1.Error{Code: code, Message: msg})
}

func TestCreateSandboxSendsRequestAndIdempotencyKey(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var req sandboxv1.CreateSandboxRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, err.Error())
			return
		}
		if got := r.Header.Get("Idempotency-Key"); got != "k1" {
			writeErr(w, 400, sandboxv1.CodeInvalidArgument, "idempotency key "+got)
			return
		}
		writeJSON(w, 201, sandboxv1.Sandbox{ID: "sb-1", State: sandboxv1.StateRunning, Template: req.Template, MemoryMiB: req.MemoryMiB, Env: req.Env})
	})
	c := newTestServer(t, mux)
	sb, err := c.CreateSandbox(context.Background(), sandboxv1.CreateSandboxRequest{Template: "minimal", MemoryMiB: 256, Env: map[string]string{"A": "b"}}, IdempotencyKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sb-1" || sb.Template != "minimal" || sb.MemoryMiB != 256 || sb.Env["A"] != "b" {
		t.Errorf("got %+v, want the request echoed", sb)
	}
}

func TestAPIErrors(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		body       string
		wantCode   string
		wantInMsg  string
		isNotFound bool
	}{
		{"json", 404, `{"code":"not_found","message":"sandbox sb-9 not found"}`, sandboxv1.CodeNotFound, "sandbox sb-9 not found", true},
		{"conflict", 409, `{"code":"conflict","message":"sandbox is paused"}`, sandboxv1.CodeConflict, "is paused", false},
		{"not json", 502, `<html>bad gateway</html>`, sandboxv1.CodeInternal, "Bad Gateway", false},
		{"code from status", 429, ``, sandboxv1.CodeRateLimited, "Too Many Requests", false},
		{"escapes cleaned", 400, `{"code":"invalid_argument","message":"bad\u001b[31m input"}`, sandboxv1.CodeInvalidArgument, "bad?[31m input", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			})
			c := newTestServer(t, mux)
			_, err := c.GetSandbox(context.Background(), "sb-9")
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want *APIError", err)
			}
			if ae.Status != tt.status || ae.Code != tt.wantCode || !strings.Contains(ae.Message, tt.wantInMsg) {
				t.Errorf("got %+v, want status %d code %s message containing %q", ae, tt.status, tt.wantCode, tt.wantInMsg)
			}
			if IsNotFound(err) != tt.isNotFound {
				t.Errorf("IsNotFound = %v, want %v", !tt.isNotFound, tt.isNotFound)
			}
		})
	}
}

func TestUnauthenticated(t *testing.T) {
	c := newTestServer(t, http.NewServeMux())
	c.apiKey = "wrong"
	_, err := c.ListSandboxes(context.Background())
	if !IsCode(err, sandboxv1.CodeUnauthenticated) {
		t.Errorf("err = %v, want unauthenticated", err)
	}
}

func TestEmptyIDIsRefusedLocally(t *testing.T) {
	var hits atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	c := newTestServer(t, mux)
	if _, err := c.PauseSandbox(context.Background(), ""); err == nil {
		t.Error("PauseSandbox with an empty id succeeded")
	}
	if hits.Load() != 0 {
		t.Errorf("server got %d requests, want none", hits.Load())
	}
}

func TestIDIsEscaped(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, sandboxv1.Sandbox{ID: r.PathValue("id")})
	})
	c := newTestServer(t, mux)
	sb, err := c.GetSandbox(context.Background(), "a/../b")
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "a/../b" {
		t.Errorf("server saw id %q, want %q", sb.ID, "a/../b")
	}
}

func TestWaitForState(t *testing.T) {
	states := []sandboxv1.State{sandboxv1.StateRunning, sandboxv1.StatePausing, sandboxv1.StatePaused}
	var n atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		i := min(int(n.Add(1))-1, len(states)-1)
		writeJSON(w, 200, sandboxv1.Sandbox{ID: "sb-1", State: states[i]})
	})
	c := newTestServer(t, mux)
	sb, err := c.WaitForState(context.Background(), "sb-1", sandboxv1.StatePaused)
	if err != nil {
		t.Fatal(err)
	}
	if sb.State != sandboxv1.StatePaused || n.Load() != 3 {
		t.Errorf("state %s after %d polls, want paused after 3", sb.State, n.Load())
	}
}

func TestWaitForStateFails(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, sandboxv1.Sandbox{ID: "sb-1", State: sandboxv1.StateFailed, Reason: "guest died"})
	})
	c := newTestServer(t, mux)
	_, err := c.WaitForState(context.Background(), "sb-1", sandboxv1.StateRunning)
	if err == nil || !strings.Contains(err.Error(), "guest died") {
		t.Errorf("err = %v, want the failure reason", err)
	}
}

func TestWaitDeleted(t *testing.T) {
	var n atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) < 3 {
			writeJSON(w, 200, sandboxv1.Sandbox{ID: "sb-1", State: sandboxv1.StateDeleting})
			return
		}
		writeErr(w, 404, sandboxv1.CodeNotFound, "no such sandbox")
	})
	c := newTestServer(t, mux)
	if err := c.WaitDeleted(context.Background(), "sb-1"); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseAPIError(f *testing.F) {
	f.Add(404, []byte(`{"code":"not_found","message":"x"}`))
	f.Add(500, []byte("<html>\x1b[2J</html>"))
	f.Add(400, []byte(`{"code":"\u0007","message":"\u202e\xff"}`))
	f.Add(0, []byte{})
	f.Add(503, []byte(`{"code":"unavailable","message":"no room","reason":"no_\u0007capacity"}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		e := parseAPIError(status, body)
		if e.Code == "" || e.Message == "" {
			t.Fatalf("empty code or message: %+v", e)
		}
		if len(e.Message) > 1300 || len(e.Code) > 64 || len(e.Reason) > 64 {
			t.Fatalf("unbounded text: %d, %d bytes", len(e.Message), len(e.Code))
		}
		for _, r := range e.Message + e.Code + e.Reason {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
				t.Fatalf("control character %U in %q", r, e.Message)
			}
		}
	})
}

// TestAPIErrorReason: the reason beside the code is read, and an answer
// without one (an older server) has none.
func TestAPIErrorReason(t *testing.T) {
	e := parseAPIError(503, []byte(`{"code":"unavailable","message":"no node can take it","reason":"no_capacity"}`))
	if e.Code != sandboxv1.CodeUnavailable || e.Reason != "no_capacity" || !IsReason(e, "no_capacity") || !IsCode(e, sandboxv1.CodeUnavailable) {
		t.Errorf("parsed %+v, want unavailable with reason no_capacity", e)
	}
	e = parseAPIError(503, []byte(`{"code":"unavailable","message":"down"}`))
	if e.Reason != "" || IsReason(e, "") {
		t.Errorf("parsed %+v, want no reason", e)
	}
}
