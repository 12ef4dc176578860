// Package mcpserver is SPACE as tools for any MCP client (`space mcp`),
// built on the official Go SDK of the Model Context Protocol
// (github.com/modelcontextprotocol/go-sdk). Every tool is one or two calls of
// SPACE's public REST API through sdk/go, made with the caller's own API
// key: the stdio transport takes it from SPACE_API_KEY, the streamable HTTP
// transport from each request's Authorization header. A tool can therefore
// do exactly what that key can — its tenant's sandboxes, within its quotas —
// and the API, not this package, decides.
//
// A tool that fails answers a tool error (the server's code and message as
// it said them); bad arguments are refused before anything is sent, naming
// the field; garbage on the wire is the SDK's protocol error.
package mcpserver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	space "github.com/spacesandbox/space/sdk/go"
)

// Config configures the tools.
type Config struct {
	// APIURL is the SPACE API the tools call (SPACE_API_URL).
	APIURL string
	// Key is the API key of the stdio transport. Empty for HTTP, where
	// each request brings its own.
	Key string
	// Version is reported to clients as the server's version.
	Version string
	// HTTPClient makes the API calls; nil: http.DefaultClient.
	HTTPClient *http.Client
}

// tools holds what every tool handler needs.
type tools struct {
	cfg Config
	// perRequest: the key comes from each HTTP request, never from cfg.
	perRequest bool
}

// NewServer returns the MCP server of SPACE's tools for the stdio
// transport, every call made with cfg.Key.
func NewServer(cfg Config) *mcp.Server {
	return newServer(&tools{cfg: cfg})
}

func newServer(t *tools) *mcp.Server {
	version := t.cfg.Version
	if version == "" {
		version = "dev"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "space", Title: "SPACE sandboxes", Version: version}, &mcp.ServerOptions{
		Instructions: "Tools of SPACE, a sandbox platform: create a sandbox (a microVM or a namespace sandbox with its own filesystem and network policy), run commands in it, read and write its files, expose its ports, snapshot, fork, hibernate and delete it. Sandboxes are those of the API key's tenant. Delete what you create when you are done.",
	})
	t.register(s)
	return s
}

// client returns an API client with the key of the call: the HTTP
// request's bearer token, or the stdio key.
func (t *tools) client(req *mcp.CallToolRequest) (*space.Client, error) {
	key := t.cfg.Key
	if t.perRequest {
		key = ""
		if req != nil && req.Extra != nil {
			key, _ = bearer(req.Extra.Header)
		}
		if key == "" {
			return nil, errors.New("this request carries no API key: send Authorization: Bearer <SPACE API key>")
		}
	}
	if key == "" {
		return nil, errors.New("no API key: set SPACE_API_KEY for `space mcp`")
	}
	opts := []space.Option{space.WithUserAgent("space-mcp")}
	if t.cfg.HTTPClient != nil {
		opts = append(opts, space.WithHTTPClient(t.cfg.HTTPClient))
	}
	return space.NewClient(t.cfg.APIURL, key, opts...), nil
}

// bearer returns the token of an Authorization: Bearer header.
func bearer(h http.Header) (string, bool) {
	v, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

// RunStdio serves the tools over standard input and output until ctx ends
// or the client closes the stream. A line that is no JSON-RPC message is
// answered with a JSON-RPC error, and the session goes on (stdioTransport).
func RunStdio(ctx context.Context, cfg Config) error {
	return NewServer(cfg).Run(ctx, &stdioTransport{in: os.Stdin, out: os.Stdout})
}

// sessionIdle is how long an HTTP session lives without a request.
const sessionIdle = 30 * time.Minute

// maxSessions bounds the HTTP sessions remembered with their key.
const maxSessions = 10_000

// HTTPHandler serves the tools over MCP's streamable HTTP transport. Every
// request must carry a SPACE API key (Authorization: Bearer), which the
// tools of that request use; a session is bound to the key that opened it,
// and a request of the session with another key is refused (403), so a
// leaked session id is no way into another tenant's sandboxes.
func HTTPHandler(cfg Config) http.Handler {
	cfg.Key = ""
	srv := newServer(&tools{cfg: cfg, perRequest: true})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		SessionTimeout: sessionIdle,
	})
	b := &bindings{keys: map[string]binding{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := bearer(r.Header)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="space"`)
			http.Error(w, "send a SPACE API key: Authorization: Bearer <key>", http.StatusUnauthorized)
			return
		}
		digest := sha256.Sum256([]byte(key))
		sid := r.Header.Get("Mcp-Session-Id")
		if sid != "" {
			switch b.bind(sid, digest) {
			case otherKey:
				http.Error(w, "this MCP session was opened with another API key", http.StatusForbidden)
				return
			case full:
				w.Header().Set("Retry-After", "60")
				http.Error(w, fmt.Sprintf("%d MCP sessions are open: close one (DELETE) or retry later", maxSessions), http.StatusServiceUnavailable)
				return
			}
		}
		h.ServeHTTP(w, r)
		switch {
		case sid == "":
			// The session this request opened (initialize) is its key's.
			if opened := w.Header().Get("Mcp-Session-Id"); opened != "" {
				b.bind(opened, digest)
			}
		case r.Method == http.MethodDelete:
			b.forget(sid)
		}
	})
}

// ErrorText is the text of a tool error for err: the API's code and message
// when the API answered, else err's text.
func ErrorText(err error) string {
	var ae *space.APIError
	if errors.As(err, &ae) {
		if ae.Reason != "" {
			return fmt.Sprintf("%s (%s): %s", ae.Code, ae.Reason, ae.Message)
		}
		return fmt.Sprintf("%s: %s", ae.Code, ae.Message)
	}
	return err.Error()
}
