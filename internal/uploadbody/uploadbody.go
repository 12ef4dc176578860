// Package uploadbody bounds the body of a file upload on its way to a
// sandbox: in size (http.MaxBytesReader) and in the wait for each next byte,
// so that a body longer than allowed is cut and one that stops arriving (a
// Content-Length larger than what is sent, a client gone silent) ends the
// request instead of holding it, and the guest's stream, open forever.
package uploadbody

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// Body is a bounded request body.
type Body struct {
	r         io.ReadCloser
	rc        *http.ResponseController
	idle      time.Duration
	stalled   atomic.Bool
	tooLarge  atomic.Bool
	sizeLimit int64
}

// Limit replaces r.Body with a Body that reads at most max bytes and waits
// at most idle for each read (no bound when idle is 0), and returns it.
func Limit(w http.ResponseWriter, r *http.Request, max int64, idle time.Duration) *Body {
	b := &Body{r: http.MaxBytesReader(w, r.Body, max), rc: http.NewResponseController(w), idle: idle, sizeLimit: max}
	r.Body = b
	return b
}

// Read reads with a read deadline idle from now.
func (b *Body) Read(p []byte) (int, error) {
	if b.idle > 0 {
		if err := b.rc.SetReadDeadline(time.Now().Add(b.idle)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return 0, err
		}
	}
	n, err := b.r.Read(p)
	var mb *http.MaxBytesError
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.stalled.Store(true)
	case errors.As(err, &mb):
		b.tooLarge.Store(true)
	}
	return n, err
}

// Close closes the underlying body.
func (b *Body) Close() error { return b.r.Close() }

// Stalled reports that a read waited idle without a byte.
func (b *Body) Stalled() bool { return b.stalled.Load() }

// TooLarge reports that the body passed its size limit.
func (b *Body) TooLarge() bool { return b.tooLarge.Load() }
