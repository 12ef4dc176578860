package intercept

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
)

// injected is one secret the session added to a request, kept (as its own
// copy) until the connection ends so every later response on it is
// redacted.
type injected struct {
	credID string
	secret []byte
}

// redactor removes a session's injected secrets, in every form secretForms
// lists, from response bytes: each byte of every occurrence of every form
// is overwritten with one marker byte, so lengths do not change (a
// Content-Length stays right) and the text around the occurrence is left
// as it was. Occurrences may overlap; their union is overwritten.
//
// The marker is a byte that appears in no form, so the output contains no
// form: an occurrence in it cannot include a marker, so it would be in the
// input untouched, where it was found and overwritten.
type redactor struct {
	m *matcher
	// fold finds the forms in any ASCII case, for header names: net/http
	// canonicalises their case as it reads them, and a secret with its
	// case changed is most of the secret.
	fold   *matcher
	marker byte
	creds  []string // credential id per pattern id
	forms  int      // number of patterns, for tests and the log
}

// markerCandidates are tried in order; all are HTTP token characters, so a
// redacted header name stays a valid name.
const markerCandidates = "*#~^!|`$&'+-._"

// newRedactor builds the redactor of secrets. The error is
// ErrFailedPrecondition when a secret cannot be redacted: shorter than
// credentials.MinSecretLen (it would match ordinary text), or using every
// marker candidate byte.
func newRedactor(secrets []injected) (*redactor, error) {
	r := &redactor{}
	var patterns [][]byte
	var ids []int
	used := [256]bool{}
	for _, s := range secrets {
		if len(s.secret) < credentials.MinSecretLen {
			return nil, fmt.Errorf("credential %s: a secret of %d bytes is too short to be redacted from responses (want at least %d): %w",
				s.credID, len(s.secret), credentials.MinSecretLen, errdefs.ErrFailedPrecondition)
		}
		id := slices.Index(r.creds, s.credID)
		if id < 0 {
			id = len(r.creds)
			r.creds = append(r.creds, s.credID)
		}
		for _, f := range secretForms(s.secret) {
			patterns = append(patterns, f)
			ids = append(ids, id)
			for _, b := range f {
				used[b] = true
			}
		}
	}
	r.marker = 0
	for i := range len(markerCandidates) {
		if c := markerCandidates[i]; !used[c] {
			r.marker = c
			break
		}
	}
	if r.marker == 0 {
		return nil, fmt.Errorf("credential secrets use every byte of %q; none is left to mark a redaction: %w", markerCandidates, errdefs.ErrFailedPrecondition)
	}
	m, err := newMatcher(patterns, ids)
	if err != nil {
		return nil, err
	}
	var folded [][]byte
	var foldIDs []int
	seen := map[string]bool{}
	for i, p := range patterns {
		l := bytes.ToLower(p)
		if !seen[string(l)] {
			seen[string(l)] = true
			folded, foldIDs = append(folded, l), append(foldIDs, ids[i])
		}
	}
	fold, err := newMatcher(folded, foldIDs)
	if err != nil {
		return nil, err
	}
	r.m, r.fold, r.forms = m, fold, len(patterns)
	return r, nil
}

// tally counts redacted occurrences per credential (indexed like
// redactor.creds).
type tally []int

func (t tally) total() int {
	n := 0
	for _, c := range t {
		n += c
	}
	return n
}

// scanner is the state of redacting one stream: the automaton's state,
// and where the last overwritten run ended, so overlapping occurrences
// count once.
type scanner struct {
	r        *redactor
	m        *matcher // r.m, or r.fold
	state    int32
	markEnd  int64 // absolute offset one past the last overwritten byte
	runStart int64 // where the run of overwritten bytes ending at markEnd starts
	counts   tally
}

func (r *redactor) scanner() *scanner {
	return &scanner{r: r, m: r.m, counts: make(tally, len(r.creds))}
}

// scan feeds buf[from:] to the automaton and overwrites every occurrence
// that ends in it. base is the absolute stream offset of buf[0]; an
// occurrence that began before from must still be in buf[:from] (the
// caller holds back held() bytes).
func (sc *scanner) scan(buf []byte, from int, base int64) {
	m := sc.m
	s := sc.state
	if d := m.dense; d != nil {
		n := int32(m.nclass)
		cls := &m.class
		off := s * n
		starts := &m.starts
		for i := from; i < len(buf); i++ {
			if off == 0 {
				// At the root most bytes start nothing: skip them
				// without the dependent table load.
				for i < len(buf) && !starts[buf[i]] {
					i++
				}
				if i == len(buf) {
					break
				}
			}
			off = d[off+int32(cls[buf[i]])]
			if off < 0 {
				off = ^off
				sc.mark(buf, i, off/n, base)
			}
		}
		s = off / n
	} else {
		for i := from; i < len(buf); i++ {
			if s == 0 {
				for i < len(buf) && !m.starts[buf[i]] {
					i++
				}
				if i == len(buf) {
					break
				}
			}
			s = m.next(s, buf[i])
			if m.outLen[s] > 0 {
				sc.mark(buf, i, s, base)
			}
		}
	}
	sc.state = s
}

// mark overwrites the occurrence of the state s's output that ends at
// buf[i]. Occurrences end in increasing order but may start in any order
// (a longer one ending later can start before a shorter one), so what is
// overwritten is tracked as the last contiguous run [runStart, markEnd):
// bytes already in it are not written again.
func (sc *scanner) mark(buf []byte, i int, s int32, base int64) {
	m := sc.m
	end := base + int64(i) + 1
	start := end - int64(m.outLen[s])
	if start >= sc.markEnd {
		sc.counts[m.outID[s]]++
		sc.runStart = start
	}
	if start < sc.runStart {
		for j := start; j < sc.runStart; j++ {
			buf[j-base] = sc.r.marker
		}
		sc.runStart = start
	}
	for j := max(start, sc.markEnd); j < end; j++ {
		buf[j-base] = sc.r.marker
	}
	sc.markEnd = end
}

// held is how many trailing bytes of what was scanned must wait for more
// input before they can be released.
func (sc *scanner) held() int { return sc.m.held(sc.state) }

// redactString returns s with every occurrence overwritten, counting them
// into t.
func (r *redactor) redactString(s string, t tally) string {
	sc := r.scanner()
	buf := []byte(s)
	sc.scan(buf, 0, 0)
	if sc.counts.total() == 0 {
		return s
	}
	for i, c := range sc.counts {
		t[i] += c
	}
	return string(buf)
}

// redactName returns the header name k with every form overwritten in any
// ASCII case, counting them into t.
func (r *redactor) redactName(k string, t tally) string {
	sc := &scanner{r: r, m: r.fold, counts: make(tally, len(r.creds))}
	lower := []byte(strings.ToLower(k))
	if len(lower) != len(k) {
		return r.redactString(k, t) // not ASCII: ToLower changed lengths
	}
	sc.scan(lower, 0, 0)
	if sc.counts.total() == 0 {
		return k
	}
	out := []byte(k)
	for i := range out {
		if lower[i] == r.marker && k[i] != r.marker {
			out[i] = r.marker
		}
	}
	for i, c := range sc.counts {
		t[i] += c
	}
	return string(out)
}

// redactHeader redacts every name and value of h in place, counting the
// occurrences into t. Names are matched in any case.
func (r *redactor) redactHeader(h http.Header, t tally) {
	for k, vs := range h {
		nk := r.redactName(k, t)
		for i, v := range vs {
			vs[i] = r.redactString(v, t)
		}
		if nk != k {
			delete(h, k)
			h[nk] = append(h[nk], vs...)
		}
	}
}

// redactChunk is how much a redactingBody reads from its source at once.
const redactChunk = 32 << 10

// redactingBody streams src with the redactor's secrets overwritten, in
// constant memory: it holds back at most the longest form's length minus
// one byte between reads, so an occurrence split across reads (TCP
// segments, chunks) is still found. At the end of src it calls done with
// the count, before returning io.EOF; an error from done is returned
// instead, and the bytes held back are never released. On any other read
// error the held-back bytes are dropped too: they may begin a secret.
type redactingBody struct {
	src  io.ReadCloser
	sc   *scanner
	done func(tally) error

	buf   []byte
	start int   // buf[start:ready] is released and not yet read
	ready int   // buf[ready:] is held back
	base  int64 // stream offset of buf[0]
	err   error
}

func (r *redactor) body(src io.ReadCloser, done func(tally) error) *redactingBody {
	return &redactingBody{src: src, sc: r.scanner(), done: done}
}

func (b *redactingBody) Read(p []byte) (int, error) {
	for {
		if b.start < b.ready {
			n := copy(p, b.buf[b.start:b.ready])
			b.start += n
			return n, nil
		}
		if b.err != nil {
			return 0, b.err
		}
		if len(p) == 0 {
			return 0, nil
		}
		b.fill()
	}
}

// fill moves the held-back bytes to the front, reads once from src and
// scans what came.
func (b *redactingBody) fill() {
	if b.buf == nil {
		b.buf = make([]byte, 0, redactChunk+b.sc.r.m.maxLen)
	}
	held := copy(b.buf[:cap(b.buf)], b.buf[b.ready:])
	b.base += int64(b.ready)
	b.buf = b.buf[:held]
	b.start, b.ready = 0, 0
	n, err := b.src.Read(b.buf[held : held+redactChunk])
	b.buf = b.buf[:held+n]
	b.sc.scan(b.buf, held, b.base)
	b.ready = len(b.buf) - b.sc.held()
	switch {
	case err == io.EOF:
		if derr := b.finish(); derr != nil {
			b.err = derr
			return
		}
		b.ready = len(b.buf)
		b.err = io.EOF
	case err != nil:
		b.err = err
	}
}

func (b *redactingBody) finish() error {
	if b.done == nil {
		return nil
	}
	done := b.done
	b.done = nil
	return done(b.sc.counts)
}

// Close implements io.Closer.
func (b *redactingBody) Close() error { return b.src.Close() }

// sameSecret reports whether secrets holds s already.
func sameSecret(secrets []injected, credID string, s []byte) bool {
	for _, in := range secrets {
		if in.credID == credID && bytes.Equal(in.secret, s) {
			return true
		}
	}
	return false
}
