package guest

import (
	"errors"
	"fmt"
	"sync"
)

// ErrProtocol is the class of a guest that broke the guest protocol on its
// channel: a malformed or illegal HTTP/2 frame, a header block past its
// bound, flow-control abuse. The host ends the channel (the HTTP/2 client
// answers GOAWAY and closes it) or, for a stream-level error, that stream.
var ErrProtocol = errors.New("guest protocol error")

// maxProtocolErrorKinds bounds the kinds a channel keeps apart; the rest
// count as "other". The HTTP/2 client names a few dozen, all constants, so
// this holds every kind it has today while a hostile guest cannot grow the
// map (or a metric's label set) without end.
const maxProtocolErrorKinds = 64

// ProtocolErrors counts a channel's protocol errors by kind, as the HTTP/2
// client reports them (its Transport.CountError names).
type ProtocolErrors struct {
	mu    sync.Mutex // guards n, first
	n     map[string]uint64
	first string // the first kind counted
}

func newProtocolErrors() *ProtocolErrors { return &ProtocolErrors{n: map[string]uint64{}} }

// count is the HTTP/2 client's CountError hook. A guest closing its end
// between frames (read_frame_eof) is how a channel normally ends, not a
// protocol error.
func (p *ProtocolErrors) count(kind string) {
	if kind == "read_frame_eof" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.n[kind]; !ok && len(p.n) >= maxProtocolErrorKinds {
		kind = "other"
	}
	p.n[kind]++
	if p.first == "" {
		p.first = kind
	}
}

// none reports whether nothing was counted.
func (p *ProtocolErrors) none() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.first == ""
}

func (p *ProtocolErrors) counts() map[string]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]uint64, len(p.n))
	for k, v := range p.n {
		out[k] = v
	}
	return out
}

func (p *ProtocolErrors) err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.first == "" {
		return nil
	}
	var total uint64
	for _, v := range p.n {
		total += v
	}
	return fmt.Errorf("%w: %s (%d on this channel)", ErrProtocol, p.first, total)
}
