package restapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/store"
)

// idempotent makes a POST honour the Idempotency-Key header: the first
// request with a key runs and its answer is remembered (per tenant); a retry
// with the same key and the same request gets that answer again, marked
// Idempotent-Replayed, without running twice; the same key on another request
// is 409. Answers of 5xx, 202 and 429 are not remembered (the retry runs
// again, which the operations make safe; a quota refusal may pass later).
func (a *API) idempotent(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			h(w, r)
			return
		}
		if len(key) > 255 {
			a.writeError(w, r, fmt.Errorf("%w: Idempotency-Key is over 255 bytes", errdefs.ErrInvalidArgument))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if err != nil {
			a.writeError(w, r, fmt.Errorf("%w: body is over %d bytes", errTooLarge, maxJSONBody))
			return
		}
		tenant := a.caller(r).Tenant
		fingerprint := fingerprintOf(r.Method, r.URL.Path, body)
		if rec, err := a.store.GetIdempotency(r.Context(), tenant, key); err == nil {
			if rec.Fingerprint != fingerprint {
				a.writeError(w, r, fmt.Errorf("%w: Idempotency-Key was used for another request", errdefs.ErrConflict))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(rec.Status)
			_, _ = w.Write(rec.Body)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r = r.WithContext(context.WithValue(r.Context(), idempotencyKeyCtx{}, key))
		rw := &recordingWriter{ResponseWriter: w, status: http.StatusOK}
		h(rw, r)
		if rw.status >= 500 || rw.status == http.StatusAccepted || rw.status == http.StatusTooManyRequests {
			return
		}
		_, _ = a.store.PutIdempotency(context.WithoutCancel(r.Context()), store.IdempotencyRecord{
			Tenant: tenant, Key: key, Fingerprint: fingerprint, Status: rw.status, Body: rw.body.Bytes(), CreatedAt: time.Now().UTC(),
		})
	}
}

type idempotencyKeyCtx struct{}

// idempotencyKeyOf is the Idempotency-Key the request in ctx carries, or "".
// Handlers whose first write makes a resource derive its id from it (see
// sandbox.DerivedID): the answer is remembered only once the handler
// returns, and a server that dies in between must not make the resource
// twice on the retry.
func idempotencyKeyOf(ctx context.Context) string {
	k, _ := ctx.Value(idempotencyKeyCtx{}).(string)
	return k
}

// recordingWriter passes a response through and keeps a copy of its status
// and body (bounded: idempotent answers are small JSON documents).
type recordingWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *recordingWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if w.body.Len() < maxJSONBody {
		w.body.Write(p)
	}
	return w.ResponseWriter.Write(p)
}
