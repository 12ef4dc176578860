package intercept

import (
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
)

// RedactionRecorder is the optional ability of a CredentialSource to
// record, in the credential audit log, that a secret was removed from a
// response (*credentials.Manager has it). When the source has it, a
// failed record fails closed: the response is not relayed, or is cut
// where the failure was found. Without it redactions are logged and
// counted only.
type RedactionRecorder interface {
	RecordRedaction(ctx context.Context, r credentials.Redaction) error
}

// Counters counts what interceptors removed and refused. The zero value is
// ready; it is safe for concurrent use, and one Counters may be shared by
// every Interceptor of a node.
type Counters struct {
	// Redactions counts occurrences of an injected secret removed from
	// responses (status lines, headers, bodies, trailers).
	Redactions atomic.Uint64
	// Unscannable counts responses refused because their content coding
	// could not be scanned for the secret.
	Unscannable atomic.Uint64
}

// errUnscannable marks a response whose content coding the gateway cannot
// decode to scan it.
var errUnscannable = errors.New("response content coding cannot be scanned for the credential")

// redactResponse prepares resp, on a connection that carried a secret, so
// that none reaches the guest: its body decoded if it is compressed, its
// status line and header redacted (and the removals recorded before a
// byte is written), its body and trailers wrapped to be redacted as they
// stream.
func (s *session) redactResponse(ctx context.Context, req *http.Request, resp *http.Response) error {
	if err := s.decodeForScan(req, resp); err != nil {
		return err
	}
	if err := s.redactHead(ctx, resp); err != nil {
		return err
	}
	if resp.Trailer != nil {
		// The trailer's names are announced in the header.
		t := make(tally, len(s.red.creds))
		s.red.redactHeader(resp.Trailer, t)
		if err := s.recordRedactions(ctx, t, "header"); err != nil {
			return err
		}
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	red, trailer := s.red, resp.Trailer
	resp.Body = red.body(resp.Body, func(t tally) error {
		if err := s.recordRedactions(ctx, t, "body"); err != nil {
			return err
		}
		if trailer == nil {
			return nil
		}
		tt := make(tally, len(red.creds))
		red.redactHeader(trailer, tt) // filled in as the body ended
		return s.recordRedactions(ctx, tt, "header")
	})
	return nil
}

// redactHead redacts resp's status line and header in place and records
// what it removed.
func (s *session) redactHead(ctx context.Context, resp *http.Response) error {
	t := make(tally, len(s.red.creds))
	resp.Status = s.red.redactString(resp.Status, t)
	s.red.redactHeader(resp.Header, t)
	return s.recordRedactions(ctx, t, "header")
}

// recordRedactions logs, counts and audits the occurrences in t, one
// record per credential. The error is the audit log's.
func (s *session) recordRedactions(ctx context.Context, t tally, where string) error {
	rec, audited := s.ic.Credentials.(RedactionRecorder)
	for i, n := range t {
		if n == 0 {
			continue
		}
		id := s.red.creds[i]
		s.log.Warn("credential secret removed from a response", "credential", id, "where", where, "count", n)
		if c := s.ic.Counters; c != nil {
			c.Redactions.Add(uint64(n))
		}
		if !audited {
			continue
		}
		req := s.ic.Identity
		req.Host = s.host
		if err := rec.RecordRedaction(ctx, credentials.Redaction{Request: req, CredentialID: id, Where: where, Count: n}); err != nil {
			return fmt.Errorf("intercept %s: %w", s.host, errors.Join(err, errdefs.ErrUnavailable))
		}
	}
	return nil
}

// decodeForScan replaces a compressed body by its decoded bytes, so it can
// be scanned. Requests that carry a secret ask for identity coding; an
// upstream that compresses anyway with gzip or deflate is decoded here and
// relayed uncompressed (Content-Encoding and Content-Length removed; the
// body is then chunked or delimited by the close). Any other coding, or
// more than one, is errUnscannable: the response is refused rather than
// relayed unscanned.
func (s *session) decodeForScan(req *http.Request, resp *http.Response) error {
	var codings []string
	for _, v := range resp.Header["Content-Encoding"] {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(textproto.TrimString(c)); c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	if len(codings) == 0 {
		delete(resp.Header, "Content-Encoding")
		return nil
	}
	if req.Method == http.MethodHead || !bodyAllowed(resp.StatusCode) || resp.Body == nil || resp.Body == http.NoBody {
		return nil // nothing to decode
	}
	var open func(io.Reader) (io.ReadCloser, error)
	switch {
	case len(codings) != 1:
	case codings[0] == "gzip" || codings[0] == "x-gzip":
		open = func(r io.Reader) (io.ReadCloser, error) { return gzip.NewReader(r) }
	case codings[0] == "deflate":
		open = zlib.NewReader
	}
	if open == nil {
		if c := s.ic.Counters; c != nil {
			c.Unscannable.Add(1)
		}
		return fmt.Errorf("upstream %s: Content-Encoding %.64q: %w: %w", s.host, strings.Join(codings, ", "), errUnscannable, errdefs.ErrUnavailable)
	}
	resp.Body = &decodedBody{src: resp.Body, open: open}
	for _, k := range []string{"Content-Encoding", "Content-Length", "Content-Md5", "Digest", "Content-Digest"} {
		delete(resp.Header, k)
	}
	resp.ContentLength = -1
	resp.Uncompressed = true
	resp.Trailer = nil // read only after the compressed stream ended: not relayed
	return nil
}

// decodedBody decodes src with open on the first Read. A corrupt stream
// fails the read, which cuts the response.
type decodedBody struct {
	src  io.ReadCloser
	open func(io.Reader) (io.ReadCloser, error)
	dec  io.ReadCloser
}

func (b *decodedBody) Read(p []byte) (int, error) {
	if b.dec == nil {
		dec, err := b.open(b.src)
		if err != nil {
			return 0, fmt.Errorf("decode the upstream's response: %w", err)
		}
		b.dec = dec
	}
	return b.dec.Read(p)
}

func (b *decodedBody) Close() error {
	if b.dec != nil {
		b.dec.Close()
	}
	return b.src.Close()
}
