package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/spacesandbox/space/internal/errdefs"
)

// A spliced plaintext HTTP flow is checked request by request, not only by
// its first bytes: a keep-alive connection allowed for one domain could
// otherwise carry a second request with another Host to the same (shared,
// CDN) address. The guest→upstream direction goes through requestStream,
// which finds every request head and every request boundary (it follows
// Content-Length and chunked framing, and nothing else of the body), checks
// each head's Host and absolute-form authority, and forwards exactly the bytes
// it decided on. What it cannot parse strictly as HTTP/1.x closes the flow:
// a lenient parser here would be one the upstream disagrees with.
//
// Refused outright, since after them the gateway could no longer tell which
// host a request names:
//   - CONNECT (a tunnel to anywhere);
//   - any Upgrade but a WebSocket one on the flow's first request (h2c
//     carries an :authority per stream; see upgradeGate for WebSocket);
//   - the HTTP/2 prior-knowledge preface ("PRI * HTTP/2.0") and any version
//     but HTTP/1.0 and HTTP/1.1.

// Bounds of a request head. maxHead is also the reader's buffer: a head must
// fit in it whole before it is forwarded.
const (
	maxHead       = 64 << 10
	maxHeaderRows = 128
	maxChunkLine  = 4 << 10
)

// Refusal reasons of requestStream, as counted and logged.
const (
	ReasonHTTPSyntax  = "bad_http_request"
	ReasonHTTPUpgrade = "http_upgrade"
	ReasonHTTPConnect = "http_connect"
)

// flowRefusal is why a flow was closed part way: a counted reason and the
// detail for the log.
type flowRefusal struct {
	reason string
	why    string
}

func (r *flowRefusal) Error() string { return r.reason + ": " + r.why }

// Is makes a refusal an errdefs.ErrPermissionDenied: the policy refused
// what the client sent.
func (r *flowRefusal) Is(target error) bool { return target == errdefs.ErrPermissionDenied }

func syntaxErr(format string, args ...any) error {
	return &flowRefusal{ReasonHTTPSyntax, fmt.Sprintf(format, args...)}
}

// requestStream is the state of one guest→upstream HTTP/1.x byte stream.
type requestStream struct {
	// check decides a request's Host or absolute-form authority; a non-nil
	// error closes the flow.
	check func(authority string) error

	// gate, when set, lets the first request upgrade to WebSocket.
	gate *upgradeGate

	requests int // request heads decided so far
	state    int
	remain   uint64 // body or chunk bytes still to forward
	scanned  int    // bytes of the current head or line already searched for its end
	rows     int    // trailer rows so far
}

const (
	stHead      = iota
	stBody      // remain bytes of a Content-Length body
	stChunkLine // a chunk-size line
	stChunkData // remain bytes of chunk data
	stChunkEnd  // the CRLF after chunk data
	stTrailer   // trailer fields, up to the empty line
)

// advance decides a prefix of p (the unforwarded bytes so far, starting at
// the first byte not yet decided): it returns how many bytes may be
// forwarded. n < len(p) with a nil error means more bytes are needed to
// decide the rest.
func (s *requestStream) advance(p []byte) (n int, err error) {
	for n < len(p) {
		k, err := s.step(p[n:])
		n += k
		if err != nil || k == 0 {
			return n, err
		}
	}
	return n, nil
}

// step decides one element (a head, body bytes, a chunk line) at p's start.
func (s *requestStream) step(p []byte) (int, error) {
	switch s.state {
	case stHead:
		end, err := s.findEnd(p, []byte("\r\n\r\n"), maxHead, "request head")
		if end < 0 || err != nil {
			return 0, err
		}
		upgrade, err := s.head(p[:end])
		if err != nil {
			return 0, err
		}
		s.requests++
		if upgrade {
			return end, errAwaitUpgrade
		}
		return end, nil
	case stBody, stChunkData:
		k := uint64(len(p))
		if k > s.remain {
			k = s.remain
		}
		s.remain -= k
		if s.remain == 0 {
			if s.state == stBody {
				s.state = stHead
			} else {
				s.state = stChunkEnd
			}
		}
		return int(k), nil
	case stChunkEnd:
		if len(p) < 2 {
			return 0, nil
		}
		if p[0] != '\r' || p[1] != '\n' {
			return 0, syntaxErr("chunk data not followed by CRLF")
		}
		s.state = stChunkLine
		return 2, nil
	case stChunkLine:
		end, err := s.findEnd(p, []byte("\r\n"), maxChunkLine, "chunk-size line")
		if end < 0 || err != nil {
			return 0, err
		}
		size, err := chunkSize(p[:end-2])
		if err != nil {
			return 0, err
		}
		if size == 0 {
			s.state, s.rows = stTrailer, 0
		} else {
			s.state, s.remain = stChunkData, size
		}
		return end, nil
	case stTrailer:
		end, err := s.findEnd(p, []byte("\r\n"), maxChunkLine, "trailer field")
		if end < 0 || err != nil {
			return 0, err
		}
		line := p[:end-2]
		if len(line) == 0 {
			s.state = stHead
			return end, nil
		}
		if s.rows++; s.rows > maxHeaderRows {
			return 0, syntaxErr("more than %d trailer fields", maxHeaderRows)
		}
		if _, _, err := field(line); err != nil {
			return 0, err
		}
		return end, nil
	}
	return 0, fmt.Errorf("request stream in unknown state %d", s.state)
}

// findEnd returns the offset just past the first sep in p, or -1 when p has
// none yet; past limit bytes without one it fails. It resumes the search
// where the last call stopped, so a head arriving byte by byte costs linear
// time.
func (s *requestStream) findEnd(p, sep []byte, limit int, what string) (int, error) {
	from := max(s.scanned-len(sep)+1, 0)
	if i := bytes.Index(p[from:min(len(p), limit)], sep); i >= 0 {
		s.scanned = 0
		return from + i + len(sep), nil
	}
	if len(p) >= limit {
		return -1, syntaxErr("%s longer than %d bytes", what, limit)
	}
	s.scanned = len(p)
	return -1, nil
}

// head checks one whole request head (ending in the empty line) and sets
// the framing of its body. upgrade reports an allowed WebSocket upgrade:
// nothing more may be forwarded before the upstream's answer.
func (s *requestStream) head(h []byte) (upgrade bool, err error) {
	if s.requests == 0 && s.gate != nil {
		defer func() { s.gate.decide(upgrade) }()
	}
	if err := checkLineBytes(h); err != nil {
		return false, err
	}
	first, rest, _ := bytes.Cut(h[:len(h)-2], []byte("\r\n"))
	req, err := requestLine(first)
	if err != nil {
		return false, err
	}
	var hosts, lengths, upgrades [][]byte
	var te []byte
	for rows := 0; len(rest) > 0; rows++ {
		if rows == maxHeaderRows {
			return false, syntaxErr("more than %d header fields", maxHeaderRows)
		}
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, err := field(l)
		if err != nil {
			return false, err
		}
		switch {
		case asciiEqualFold(name, "host"):
			hosts = append(hosts, value)
		case asciiEqualFold(name, "content-length"):
			lengths = append(lengths, value)
		case asciiEqualFold(name, "transfer-encoding"):
			if len(te) > 0 {
				te = append(te, ',')
			}
			te = append(te, value...)
		case asciiEqualFold(name, "upgrade"):
			upgrades = append(upgrades, value)
		}
	}
	if len(hosts) > 1 {
		return false, syntaxErr("%d Host fields", len(hosts))
	}
	if len(hosts) == 0 && req.http11 {
		return false, syntaxErr("HTTP/1.1 request without Host")
	}
	if len(hosts) == 1 {
		if err := s.checkAuthority(hosts[0]); err != nil {
			return false, err
		}
	} else if req.authority == nil {
		// HTTP/1.0 without Host: the check decides whether no name is
		// acceptable (it is only on a flow allowed by address).
		if err := s.check(""); err != nil {
			return false, err
		}
	}
	if req.authority != nil {
		if err := s.checkAuthority(req.authority); err != nil {
			return false, err
		}
	}
	if err := s.framing(req, lengths, te); err != nil {
		return false, err
	}
	if len(upgrades) == 0 {
		return false, nil
	}
	if len(upgrades) > 1 || !asciiEqualFold(upgrades[0], "websocket") || s.gate == nil || s.requests > 0 || !req.get || s.state != stHead {
		return false, &flowRefusal{ReasonHTTPUpgrade, fmt.Sprintf("Upgrade: %.40q on a plaintext flow (only a WebSocket upgrade as the first request, a GET without a body; h2c is not offered)", bytes.Join(upgrades, []byte(", ")))}
	}
	return true, nil
}

// checkAuthority checks a Host or an absolute-form authority: its syntax
// first, strictly (host[:port], the host a name of letters, digits, '-',
// '_' and '.', or a bracketed IPv6 literal; the port digits), so that the
// name the policy decides is the name any upstream reads; then the name.
func (s *requestStream) checkAuthority(a []byte) error {
	host, port := a, []byte(nil)
	if len(a) > 0 && a[0] == '[' {
		end := bytes.IndexByte(a, ']')
		if end < 0 {
			return syntaxErr("Host %.80q", a)
		}
		for _, c := range a[1:end] {
			if !(c == ':' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return syntaxErr("Host %.80q", a)
			}
		}
		host, port = a[:end+1], a[end+1:]
	} else {
		if i := bytes.IndexByte(a, ':'); i >= 0 {
			host, port = a[:i], a[i:]
		}
		for _, c := range host {
			if !(c == '-' || c == '.' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return syntaxErr("Host %.80q", a)
			}
		}
	}
	if len(port) > 0 {
		if port[0] != ':' || len(port) > 6 {
			return syntaxErr("Host %.80q: bad port", a)
		}
		for _, c := range port[1:] {
			if c < '0' || c > '9' {
				return syntaxErr("Host %.80q: bad port", a)
			}
		}
	}
	return s.check(string(a))
}

// framing sets the body state from Content-Length and Transfer-Encoding,
// refusing every combination two parsers could read differently.
func (s *requestStream) framing(req requestHead, lengths [][]byte, te []byte) error {
	s.state = stHead
	if len(te) > 0 {
		if !req.http11 {
			return syntaxErr("Transfer-Encoding in an HTTP/1.0 request")
		}
		if len(lengths) > 0 {
			return syntaxErr("both Content-Length and Transfer-Encoding")
		}
		if err := chunkedLast(te); err != nil {
			return err
		}
		s.state = stChunkLine
		return nil
	}
	switch len(lengths) {
	case 0:
		return nil
	case 1:
	default:
		return syntaxErr("%d Content-Length fields", len(lengths))
	}
	v := lengths[0]
	if len(v) == 0 || len(v) > 18 {
		return syntaxErr("Content-Length %.40q", v)
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return syntaxErr("Content-Length %.40q", v)
		}
		n = n*10 + uint64(c-'0')
	}
	if n > 0 {
		s.state, s.remain = stBody, n
	}
	return nil
}

// chunkedLast accepts a transfer-coding list whose last (and only chunked)
// coding is chunked: anything else leaves the body's end to the upstream's
// interpretation.
func chunkedLast(te []byte) error {
	parts := bytes.Split(te, []byte(","))
	for i, p := range parts {
		p = bytes.Trim(p, " \t")
		if !isTchars(p) {
			return syntaxErr("Transfer-Encoding %.60q", te)
		}
		if chunked := asciiEqualFold(p, "chunked"); chunked != (i == len(parts)-1) {
			return syntaxErr("Transfer-Encoding %.60q: chunked must be the last coding, once", te)
		}
	}
	return nil
}

// requestHead is what the gateway needs of a request line.
type requestHead struct {
	http11 bool
	get    bool
	// authority is an absolute-form target's host[:port], nil for origin-
	// and asterisk-form.
	authority []byte
}

// requestLine parses "method SP request-target SP HTTP/1.x".
func requestLine(l []byte) (requestHead, error) {
	method, rest, ok1 := bytes.Cut(l, []byte(" "))
	target, version, ok2 := bytes.Cut(rest, []byte(" "))
	if bytes.Equal(l, []byte("PRI * HTTP/2.0")) {
		return requestHead{}, &flowRefusal{ReasonHTTPUpgrade, "HTTP/2 prior-knowledge preface on a plaintext flow (h2c is not offered; use TLS)"}
	}
	if !ok1 || !ok2 || !isTchars(method) || len(target) == 0 {
		return requestHead{}, syntaxErr("request line %.80q", l)
	}
	r := requestHead{get: string(method) == "GET"}
	switch string(version) {
	case "HTTP/1.1":
		r.http11 = true
	case "HTTP/1.0":
	default:
		return requestHead{}, syntaxErr("version %.20q (only HTTP/1.0 and HTTP/1.1 are spoken in plaintext)", version)
	}
	for _, c := range target {
		if c <= ' ' || c >= 0x7f {
			return requestHead{}, syntaxErr("request target %.80q", target)
		}
	}
	if string(method) == "CONNECT" {
		return requestHead{}, &flowRefusal{ReasonHTTPConnect, fmt.Sprintf("CONNECT %.80s: the gateway is no proxy; connect to the destination directly", target)}
	}
	switch {
	case target[0] == '/':
	case string(target) == "*" && string(method) == "OPTIONS":
	default:
		auth, err := absoluteAuthority(target)
		if err != nil {
			return requestHead{}, err
		}
		r.authority = auth
	}
	return r, nil
}

// absoluteAuthority returns the host[:port] of an http:// or https://
// absolute-form target.
func absoluteAuthority(target []byte) ([]byte, error) {
	scheme, rest, ok := bytes.Cut(target, []byte("://"))
	if !ok || !(asciiEqualFold(scheme, "http") || asciiEqualFold(scheme, "https")) {
		return nil, syntaxErr("request target %.80q (origin-form or an http:// absolute URI)", target)
	}
	end := bytes.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth := rest[:end]
	if bytes.IndexByte(auth, '@') >= 0 || bytes.IndexByte(auth, '\\') >= 0 {
		return nil, syntaxErr("request target %.80q: userinfo in the authority", target)
	}
	return auth, nil
}

// field parses "name: value" with no obs-fold and no space before the
// colon; value has its optional whitespace trimmed.
func field(l []byte) (name, value []byte, err error) {
	if len(l) > 0 && (l[0] == ' ' || l[0] == '\t') {
		return nil, nil, syntaxErr("folded header line (obs-fold)")
	}
	name, value, ok := bytes.Cut(l, []byte(":"))
	if !ok || !isTchars(name) {
		return nil, nil, syntaxErr("header line %.60q", l)
	}
	for _, c := range value {
		if c < ' ' && c != '\t' || c == 0x7f {
			return nil, nil, syntaxErr("control byte %#x in header %.40q", c, name)
		}
	}
	return name, bytes.Trim(value, " \t"), nil
}

// checkLineBytes refuses NUL and any CR or LF that is not part of a CRLF.
func checkLineBytes(h []byte) error {
	for i, c := range h {
		switch c {
		case 0:
			return syntaxErr("NUL byte in the request head")
		case '\r':
			if i+1 >= len(h) || h[i+1] != '\n' {
				return syntaxErr("bare CR in the request head")
			}
		case '\n':
			if i == 0 || h[i-1] != '\r' {
				return syntaxErr("bare LF in the request head")
			}
		}
	}
	return nil
}

// chunkSize parses a chunk-size line (hex, then an optional chunk
// extension of visible bytes).
func chunkSize(l []byte) (uint64, error) {
	hex, ext, _ := bytes.Cut(l, []byte(";"))
	hex = bytes.TrimRight(hex, " \t")
	if len(hex) == 0 || len(hex) > 15 {
		return 0, syntaxErr("chunk size %.40q", l)
	}
	var n uint64
	for _, c := range hex {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, syntaxErr("chunk size %.40q", l)
		}
		n = n<<4 | uint64(d)
	}
	for _, c := range ext {
		if c < ' ' && c != '\t' || c == 0x7f {
			return 0, syntaxErr("control byte %#x in a chunk extension", c)
		}
	}
	return n, nil
}

// isTchars reports whether b is a non-empty RFC 9110 token.
func isTchars(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// copyRequests copies src to dst, deciding every request (requestStream):
// only decided bytes are written, exactly as read, and the first refusal
// ends the copy with its *flowRefusal.
//
// With a gate, the first request may be a WebSocket upgrade: its head is
// forwarded, then nothing until the upstream's answer: after a 101 the rest
// is copied as is (WebSocket frames, to the host the upgrade named), after
// any other answer every request is decided again as before.
func copyRequests(dst io.Writer, src io.Reader, check func(string) error, gate *upgradeGate) error {
	if gate != nil {
		defer gate.decide(false)
	}
	br := bufio.NewReaderSize(src, maxHead)
	s := &requestStream{check: check, gate: gate}
	err := copyDecided(dst, br, s.advance)
	if !errors.Is(err, errAwaitUpgrade) {
		return err
	}
	if gate.switched() {
		if _, err := br.WriteTo(dst); err != nil {
			return err
		}
		return io.EOF
	}
	return copyDecided(dst, br, s.advance)
}

// copyDecided copies src to dst as advance decides: advance is given the
// bytes read and not yet forwarded, and returns how many of them to
// forward; the rest waits for more bytes. The reader's buffer is the copy
// buffer, so memory is constant whatever the stream carries, and an
// element advance must see whole (a head, a record) is at most maxHead.
func copyDecided(dst io.Writer, br *bufio.Reader, advance func([]byte) (int, error)) error {
	need := 1
	for {
		_, err := br.Peek(need) // blocks until need bytes, an error, or a full buffer
		p, _ := br.Peek(br.Buffered())
		n, perr := advance(p)
		if n > 0 {
			if _, werr := dst.Write(p[:n]); werr != nil {
				return werr
			}
			br.Discard(n)
		}
		if perr != nil {
			return perr
		}
		need = br.Buffered() + 1
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			if n == 0 {
				// advance decided nothing of a full buffer, though every
				// element it waits for fits: never spin.
				return &flowRefusal{ReasonHTTPSyntax, "undecidable bytes"}
			}
		case errors.Is(err, io.EOF) && br.Buffered() > 0:
			return io.ErrUnexpectedEOF
		case err != nil:
			return err
		}
	}
}
