package e2bapi

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// statusHost is a Host that only maps errors, as the server does.
type statusHost struct{ Host }

func (statusHost) Status(err error) int {
	st, _, _ := apierr.Encode(apierr.ControlPlane, err)
	return st
}

// E2B's SDK retries a 429 only when it carries Retry-After, and raises
// RateLimitError after; a 503 is its ServiceBusyError. Every such answer of
// the E2B surface carries Retry-After, whichever way it is written.
func TestE2BBusyAnswers(t *testing.T) {
	a := &API{host: statusHost{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	quota := &store.QuotaError{Tenant: "t1", Limit: "sandboxes", Quota: store.Quota{MaxSandboxes: 1}, Usage: store.Usage{Sandboxes: 1}}
	tests := []struct {
		err    error
		status int
		retry  string
	}{
		{quota, http.StatusTooManyRequests, "1"},
		{fmt.Errorf("credential c: %w", errdefs.ErrRateLimited), http.StatusTooManyRequests, "1"},
		{fmt.Errorf("sandbox s: %w", errdefs.ErrTooManyStreams), http.StatusTooManyRequests, "1"},
		{fmt.Errorf("no node has room: %w", errdefs.ErrNoCapacity), http.StatusServiceUnavailable, "1"},
		{fmt.Errorf("database: %w", errdefs.ErrUnavailable), http.StatusServiceUnavailable, "1"},
		{fmt.Errorf("sandbox x: %w", errdefs.ErrNotFound), http.StatusNotFound, ""},
		{fmt.Errorf("bad: %w", errdefs.ErrInvalidArgument), http.StatusBadRequest, ""},
	}
	for _, tt := range tests {
		// writeE2BErr, the handlers' way.
		rec := httptest.NewRecorder()
		a.writeE2BErr(rec, httptest.NewRequest("POST", "/e2b/sandboxes", nil), tt.err)
		check(t, "writeE2BErr", tt.err, rec, tt.status, tt.retry)
		// A SPACE error body rewritten by e2bErrors (the API key check's
		// and other shared handlers' way).
		rec = httptest.NewRecorder()
		a.e2bErrors(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, tt.status, map[string]string{"code": "x", "message": tt.err.Error()})
		})).ServeHTTP(rec, httptest.NewRequest("POST", "/e2b/sandboxes", nil))
		check(t, "e2bErrors", tt.err, rec, tt.status, tt.retry)
		// writeE2BError, a status written directly.
		rec = httptest.NewRecorder()
		writeE2BError(rec, tt.status, tt.err.Error())
		check(t, "writeE2BError", tt.err, rec, tt.status, tt.retry)
	}
}

func check(t *testing.T, how string, err error, rec *httptest.ResponseRecorder, status int, retry string) {
	t.Helper()
	var e e2bError
	if jerr := json.Unmarshal(rec.Body.Bytes(), &e); jerr != nil || rec.Code != status || e.Code != status || e.Message != err.Error() {
		t.Errorf("%s(%v): HTTP %d %s, want %d {code: %d, message}", how, err, rec.Code, rec.Body, status, status)
	}
	if got := rec.Header().Get("Retry-After"); got != retry {
		t.Errorf("%s(%v): Retry-After %q, want %q", how, err, got, retry)
	}
}
