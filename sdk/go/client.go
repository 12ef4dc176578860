// Package space is the Go client of SPACE's public REST API (/v1): sandboxes and
// their lifecycle, exec (run to completion and streaming over a WebSocket), files,
// templates, tenants and API keys. The wire types are those of package sandboxv1.
//
//	c := space.NewClient("http://127.0.0.1:7070", os.Getenv("SPACE_API_KEY"))
//	sb, err := c.CreateSandbox(ctx, sandboxv1.CreateSandboxRequest{Template: "minimal"})
//
// Every method takes a context first. A non-2xx answer is returned as *APIError.
package space

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// Limits on what the client reads from a server it does not trust.
const (
	// maxJSONBody bounds an ordinary JSON answer.
	maxJSONBody = 16 << 20
	// maxExecBody bounds a run-to-completion exec answer: two 16 MiB captures,
	// JSON-escaped (up to six bytes per byte for control characters).
	maxExecBody = 200 << 20
	// maxErrorBody bounds the body of an error answer.
	maxErrorBody = 64 << 10
)

// Client talks to one SPACE server. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[:port][/prefix], without a trailing slash
	apiKey    string
	hc        *http.Client
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client use hc for every request, WebSockets included.
// A Timeout on hc also bounds streaming reads, so leave it zero and use contexts.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// NewClient returns a client of the server at baseURL (e.g. "http://127.0.0.1:7070")
// that authenticates with apiKey. An invalid baseURL is reported by the first call.
func NewClient(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{
		base:      strings.TrimRight(baseURL, "/"),
		apiKey:    apiKey,
		hc:        &http.Client{},
		userAgent: "space-go-sdk",
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL returns the server URL the client talks to.
func (c *Client) BaseURL() string { return c.base }

// CallOption configures one call.
type CallOption func(*callConfig)

type callConfig struct {
	idempotencyKey string
}

// IdempotencyKey sends key as the Idempotency-Key header of a POST, so a retried
// request is applied at most once by the server.
func IdempotencyKey(key string) CallOption {
	return func(cc *callConfig) { cc.idempotencyKey = key }
}

// request describes one HTTP call.
type request struct {
	method string
	path   string // already escaped, starting with "/"
	query  url.Values
	body   io.Reader
	json   bool // body is JSON
	opts   []CallOption
}

// newRequest builds an authenticated *http.Request for r.
func (c *Client) newRequest(ctx context.Context, r request) (*http.Request, error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, r.body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: build request (is the server URL %q right?): %w", r.method, r.path, c.base, err)
	}
	c.authorize(req.Header)
	if r.json {
		req.Header.Set("Content-Type", "application/json")
	} else if r.body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	var cc callConfig
	for _, o := range r.opts {
		o(&cc)
	}
	if cc.idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", cc.idempotencyKey)
	}
	return req, nil
}

// authorize sets the headers every request carries.
func (c *Client) authorize(h http.Header) {
	if c.apiKey != "" {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
	if c.userAgent != "" {
		h.Set("User-Agent", c.userAgent)
	}
}

// send performs r and returns the response of a 2xx answer; any other answer
// becomes an *APIError and the body is closed.
//
// Route repair: when the server answers refresh_route (the sandbox moved to
// a new execution while the request was on its way, and the server could not
// replay it), the request is sent once more if repeating it is safe — a read,
// or a request carrying an Idempotency-Key — with a body that can be rebuilt.
// No other answer is retried, and never more than once.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	resp, err := c.sendOnce(ctx, r)
	var ae *APIError
	if errors.As(err, &ae) && ae.Code == sandboxv1.CodeRefreshRoute && replayable(r) {
		if seeker, ok := r.body.(io.Seeker); ok {
			if _, serr := seeker.Seek(0, io.SeekStart); serr != nil {
				return nil, err
			}
		}
		return c.sendOnce(ctx, r)
	}
	return resp, err
}

func (c *Client) sendOnce(ctx context.Context, r request) (*http.Response, error) {
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

// replayable reports whether r may be sent again after a refresh_route: a
// read, or a request with an Idempotency-Key, whose body (if any) can be
// rewound.
func replayable(r request) bool {
	if r.body != nil {
		if _, ok := r.body.(io.Seeker); !ok {
			return false
		}
	}
	if r.method == http.MethodGet || r.method == http.MethodHead {
		return true
	}
	var cc callConfig
	for _, o := range r.opts {
		o(&cc)
	}
	return cc.idempotencyKey != ""
}

// call performs r, sending in as JSON when it is not nil and decoding the answer
// into out when out is not nil, reading at most limit bytes.
func (c *Client) call(ctx context.Context, r request, in, out any, limit int64) error {
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: encode request: %w", r.method, r.path, err)
		}
		r.body, r.json = bytes.NewReader(b), true
	}
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		// Drain a little so the connection can be reused; the answer is not needed.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := decodeJSON(resp.Body, limit, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", r.method, r.path, err)
	}
	return nil
}

// decodeJSON decodes one JSON value of at most limit bytes from r into out.
func decodeJSON(r io.Reader, limit int64, out any) error {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	if err := json.NewDecoder(lr).Decode(out); err != nil {
		if lr.N <= 0 {
			return fmt.Errorf("answer is larger than %d bytes", limit)
		}
		return err
	}
	return nil
}

// pathSegment escapes one path element, refusing an empty one, which would
// silently address a different route.
func pathSegment(what, v string) (string, error) {
	if v == "" {
		return "", fmt.Errorf("%s is empty", what)
	}
	return url.PathEscape(v), nil
}

// sandboxPath returns "/v1/sandboxes/{id}" followed by suffix.
func sandboxPath(id, suffix string) (string, error) {
	seg, err := pathSegment("sandbox id", id)
	if err != nil {
		return "", err
	}
	return "/v1/sandboxes/" + seg + suffix, nil
}
