package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spacesandbox/space/internal/errdefs"
)

// pingAfter is how long a connection may sit idle before it is checked with a
// ping on its next use: a server restart or an idle timeout in a proxy closes
// connections without the pool noticing.
const pingAfter = 30 * time.Second

// errClosed is returned by a pool after Close.
var errClosed = fmt.Errorf("postgres: store is closed: %w", errdefs.ErrFailedPrecondition)

// pool is a bounded pool of connections. pgxpool would serve, but it depends on
// a module (github.com/jackc/puddle/v2) that go.mod does not carry; the store
// needs only this much of it: at most max connections, idle ones reused last
// in first out, a connection returned in any state but idle closed instead of
// reused.
type pool struct {
	cfg *pgx.ConnConfig
	sem chan struct{} // one token per connection that may be open or being dialed

	mu     sync.Mutex // guards idle and closed
	idle   []idleConn // most recently used last
	closed bool
}

type idleConn struct {
	c     *pgx.Conn
	since time.Time
}

func newPool(cfg *pgx.ConnConfig, max int) *pool {
	return &pool{cfg: cfg, sem: make(chan struct{}, max)}
}

// acquire returns a connection, dialing one when none is idle. The caller
// hands it back with release.
func (p *pool) acquire(ctx context.Context) (*pgx.Conn, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a free connection: %w", ctx.Err())
	}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			<-p.sem
			return nil, errClosed
		}
		if len(p.idle) == 0 {
			p.mu.Unlock()
			break
		}
		ic := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		p.mu.Unlock()
		if time.Since(ic.since) < pingAfter || ic.c.Ping(ctx) == nil {
			return ic.c, nil
		}
		closeConn(ic.c)
	}
	c, err := pgx.ConnectConfig(ctx, p.cfg)
	if err != nil {
		<-p.sem
		if ctx.Err() != nil { // the caller gave up; the server may be fine
			return nil, fmt.Errorf("connect: %w", ctx.Err())
		}
		return nil, fmt.Errorf("connect: %w: %w", errdefs.ErrUnavailable, err)
	}
	return c, nil
}

// release hands c back. A connection that is closed, busy or inside a
// transaction (a caller gave up half-way) is closed rather than reused.
func (p *pool) release(c *pgx.Conn) {
	defer func() { <-p.sem }()
	pc := c.PgConn()
	reusable := !c.IsClosed() && !pc.IsBusy() && pc.TxStatus() == 'I'
	p.mu.Lock()
	if reusable && !p.closed {
		p.idle = append(p.idle, idleConn{c, time.Now()})
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	closeConn(c)
}

// discardIdle closes every idle connection. It is called when one turned
// out closed by the server: after a restart or fail-over the others are
// closed too, and each would cost a failed attempt.
func (p *pool) discardIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, ic := range idle {
		closeConn(ic.c)
	}
}

// close closes the idle connections and makes every later acquire fail;
// connections in use are closed as they are released.
func (p *pool) close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	var errs []error
	for _, ic := range idle {
		errs = append(errs, closeConn(ic.c))
	}
	return errors.Join(errs...)
}

// closeConn closes c, giving the goodbye message a bounded time.
func closeConn(c *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Close(ctx)
}
