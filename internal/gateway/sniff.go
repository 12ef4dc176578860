package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The kinds of first bytes sniff recognises.
const (
	kindOther = iota
	kindTLS
	kindHTTP
)

// maxSniff bounds what sniff reads before deciding: a ClientHello (it may
// span records: post-quantum key shares are large) or an HTTP request head.
const maxSniff = 64 << 10

// errNothingSent: the client sent nothing first: it closed, or the sniff
// deadline passed (errSilent).
var errNothingSent = errors.New("client sent nothing first")

// errSilent: the sniff deadline passed before the client's first byte.
var errSilent = fmt.Errorf("%w before the sniff deadline", errNothingSent)

type firstBytes struct {
	kind int
	// name is the TLS SNI ("" when absent); an HTTP flow's Hosts are
	// decided by copyRequests.
	name string
	// raw is every byte read, to be replayed.
	raw []byte
}

// sniff reads the start of a client's stream: a TLS ClientHello gives its
// SNI, an HTTP request line marks the flow as HTTP; anything else is left
// alone. The connection's read deadline bounds it.
func sniff(c net.Conn) (firstBytes, error) {
	rec := &recorder{r: c, limit: maxSniff}
	var one [1]byte
	if _, err := io.ReadFull(rec, one[:]); err != nil {
		if isTimeout(err) {
			return firstBytes{raw: rec.buf}, errSilent
		}
		if errors.Is(err, io.EOF) {
			return firstBytes{raw: rec.buf}, errNothingSent
		}
		return firstBytes{raw: rec.buf}, err
	}
	switch {
	case one[0] == 0x16: // TLS handshake record
		name, err := clientHelloSNI(rec)
		if err != nil {
			return firstBytes{raw: rec.buf}, fmt.Errorf("TLS ClientHello: %w", err)
		}
		return firstBytes{kind: kindTLS, name: name, raw: rec.buf}, nil
	case isTchars(one[:]):
		isHTTP, err := httpRequestLine(rec)
		if err != nil {
			return firstBytes{raw: rec.buf}, fmt.Errorf("HTTP request: %w", err)
		}
		if isHTTP {
			return firstBytes{kind: kindHTTP, raw: rec.buf}, nil
		}
	}
	return firstBytes{raw: rec.buf}, nil
}

// recorder reads through r and keeps every byte, up to limit.
type recorder struct {
	r     io.Reader
	buf   []byte
	pos   int // replay position for readers that restart
	limit int
}

func (r *recorder) Read(p []byte) (int, error) {
	if r.pos < len(r.buf) {
		n := copy(p, r.buf[r.pos:])
		r.pos += n
		return n, nil
	}
	if len(r.buf) >= r.limit {
		return 0, fmt.Errorf("more than %d bytes before a decision", r.limit)
	}
	if room := r.limit - len(r.buf); len(p) > room {
		p = p[:room]
	}
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	r.pos = len(r.buf)
	return n, err
}

// rewind makes the next Read start again from the first recorded byte.
func (r *recorder) rewind() { r.pos = 0 }

var errGotHello = errors.New("client hello read")

// clientHelloSNI parses the ClientHello with crypto/tls itself (no hand
// parser of hostile bytes): a server handshake over the recorded stream
// that stops as soon as the hello is decoded.
func clientHelloSNI(rec *recorder) (string, error) {
	rec.rewind()
	var sni string
	got := false
	srv := tls.Server(sniffConn{rec}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni, got = h.ServerName, true
			return nil, errGotHello
		},
	})
	err := srv.Handshake()
	if got {
		return sni, nil
	}
	if err == nil {
		err = errors.New("no ClientHello")
	}
	return "", err
}

// httpRequestLine reads the first line of what may be an HTTP request: it
// is one when it starts with a token and a space and names a version
// ("HTTP/"), whatever the version (the h2 preface is one too, so that it is
// refused rather than spliced). The request itself, this one and every
// other on the flow, is parsed and decided by copyRequests. A first line
// that starts like a request but does not end within maxSniff fails: a long
// request line must not pass as "not HTTP".
func httpRequestLine(rec *recorder) (isHTTP bool, err error) {
	rec.rewind()
	br := bufio.NewReaderSize(rec, maxSniff)
	line, err := br.ReadSlice('\n')
	method, _, spaced := bytes.Cut(line, []byte(" "))
	if !spaced || !isTchars(method) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("request line not ended within %d bytes: %w", maxSniff, err)
	}
	return bytes.Contains(line, []byte(" HTTP/")), nil
}

// sniffConn is a read-only net.Conn over a recorder: what crypto/tls writes
// (an alert) is dropped.
type sniffConn struct{ r io.Reader }

func (c sniffConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (sniffConn) Write(p []byte) (int, error)      { return len(p), nil }
func (sniffConn) Close() error                     { return nil }
func (sniffConn) LocalAddr() net.Addr              { return nil }
func (sniffConn) RemoteAddr() net.Addr             { return nil }
func (sniffConn) SetDeadline(time.Time) error      { return nil }
func (sniffConn) SetReadDeadline(time.Time) error  { return nil }
func (sniffConn) SetWriteDeadline(time.Time) error { return nil }
