// Package loglimit bounds log lines that hostile input can provoke (refused
// capabilities, refused network flows): at most a number of lines per key
// and second, and the next line let through says how many were held back.
// Counters, not logs, are the complete record.
package loglimit

import (
	"sync"
	"time"
)

// maxKeys bounds the keys remembered; beyond it the oldest windows are
// dropped (a flood of distinct keys cannot grow the map without bound).
const maxKeys = 4096

// Limiter lets at most PerSecond lines per key through each second. The
// zero value lets nothing through; use New.
type Limiter struct {
	perSecond int

	mu   sync.Mutex
	keys map[string]*window
}

type window struct {
	start      time.Time
	n          int
	suppressed int
}

// New returns a Limiter of perSecond lines per key and second.
func New(perSecond int) *Limiter {
	return &Limiter{perSecond: perSecond, keys: map[string]*window{}}
}

// Allow reports whether a line for key may be logged at now, and when it
// may, how many lines for key were held back since the last one let through.
func (l *Limiter) Allow(key string, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]*window{}
	}
	w := l.keys[key]
	if w == nil {
		if len(l.keys) >= maxKeys {
			l.forgetOld(now)
		}
		w = &window{start: now}
		l.keys[key] = w
	}
	if now.Sub(w.start) >= time.Second {
		w.start, w.n = now, 0
	}
	if w.n >= l.perSecond {
		w.suppressed++
		return 0, false
	}
	w.n++
	suppressed, w.suppressed = w.suppressed, 0
	return suppressed, true
}

// forgetOld drops windows older than a second (their held-back counts are
// lost: the counters still have them); if none is, it drops them all.
func (l *Limiter) forgetOld(now time.Time) {
	for k, w := range l.keys {
		if now.Sub(w.start) >= time.Second {
			delete(l.keys, k)
		}
	}
	if len(l.keys) >= maxKeys {
		clear(l.keys)
	}
}
