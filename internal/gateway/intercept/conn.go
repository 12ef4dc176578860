package intercept

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// errInterrupted is what a timeoutConn's Read returns once interrupted.
var errInterrupted = errors.New("read interrupted: connection is closing")

// timeoutConn bounds every Read and Write of a connection. A read either
// waits until an absolute deadline the session set for a phase (the next
// request's first byte, its header) or, with a per-read timeout set, until
// that long after the Read started, so a slow but live body stream never
// times out while a stalled one does. Writes always use writeTimeout.
//
// interruptReads stops the reader until the next readUntil, even one about
// to refresh its deadline: the session uses it to take back a
// body-forwarding goroutine.
type timeoutConn struct {
	net.Conn
	writeTimeout time.Duration

	mu          sync.Mutex // guards readTimeout, interrupted and read deadline changes
	readTimeout time.Duration
	interrupted bool
}

func newTimeoutConn(c net.Conn, writeTimeout time.Duration) *timeoutConn {
	return &timeoutConn{Conn: c, writeTimeout: writeTimeout}
}

// Read implements net.Conn.
func (c *timeoutConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.interrupted {
		c.mu.Unlock()
		return 0, errInterrupted
	}
	if c.readTimeout > 0 {
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.readTimeout)); err != nil {
			c.mu.Unlock()
			return 0, err
		}
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

// Write implements net.Conn.
func (c *timeoutConn) Write(p []byte) (int, error) {
	if c.writeTimeout > 0 {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.writeTimeout)); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

// readUntil makes reads wait until the absolute time t. It starts a new
// phase: reads interrupted before work again.
func (c *timeoutConn) readUntil(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.interrupted = false
	c.readTimeout = 0
	_ = c.Conn.SetReadDeadline(t)
}

// readEach makes each read wait at most d.
func (c *timeoutConn) readEach(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readTimeout = d
}

// interruptReads fails the pending Read, if any, and every later one until
// readUntil.
func (c *timeoutConn) interruptReads() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.interrupted = true
	_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
}

// headerLimit caps the bytes read from r while a header is being read; the
// bufio.Reader above it then fails with io.EOF, and exceeded tells that
// apart from the peer closing.
type headerLimit struct {
	r       io.Reader
	limited bool
	left    int64
}

func (l *headerLimit) Read(p []byte) (int, error) {
	if !l.limited {
		return l.r.Read(p)
	}
	if l.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

func (l *headerLimit) set(n int64) { l.limited, l.left = true, n }
func (l *headerLimit) off()        { l.limited = false }
func (l *headerLimit) exceeded() bool {
	return l.limited && l.left <= 0
}

// flushingBody is a response body that flushes what was written to the
// guest whenever the next read from the upstream may block, so streamed
// responses (server-sent events from a model API) reach the guest as they
// arrive, while a fast body still goes out in full buffers.
type flushingBody struct {
	io.ReadCloser
	upstream *bufio.Reader
	guest    *bufio.Writer
}

func (b *flushingBody) Read(p []byte) (int, error) {
	if b.upstream.Buffered() == 0 && b.guest.Buffered() > 0 {
		if err := b.guest.Flush(); err != nil {
			return 0, err
		}
	}
	return b.ReadCloser.Read(p)
}

// trackedBody records how reading a request body ended, so the session
// knows whether the upstream answered before it had the whole body, and
// whether a failed forward was the guest's doing.
type trackedBody struct {
	io.ReadCloser

	mu  sync.Mutex // guards eof and err
	eof bool
	err error
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.mu.Lock()
		if err == io.EOF {
			b.eof = true
		} else if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

// state reports whether the body was read to its end, and the first read
// error otherwise.
func (b *trackedBody) state() (eof bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof, b.err
}
