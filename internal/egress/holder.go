package egress

import "sync/atomic"

// denyAll is what a Holder returns before any policy was stored: it denies
// every connection and query, so a gateway that forgot to load a policy
// fails closed.
var denyAll = &Policy{}

// Holder holds the current Policy of one sandbox and lets the gateway swap
// it atomically on a live update. The zero Holder is ready to use and
// denies everything until Store is called.
type Holder struct {
	p atomic.Pointer[Policy]
}

// NewHolder returns a Holder holding p.
func NewHolder(p *Policy) *Holder {
	h := &Holder{}
	h.Store(p)
	return h
}

// Load returns the current policy; never nil.
func (h *Holder) Load() *Policy {
	if p := h.p.Load(); p != nil {
		return p
	}
	return denyAll
}

// Store replaces the current policy. Storing nil makes Load deny everything.
func (h *Holder) Store(p *Policy) {
	h.p.Store(p)
}
