package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spacesandbox/space/internal/mcpserver"
)

func init() {
	commands = append(commands,
		&command{path: "mcp", args: "[--http ADDR]",
			summary: "serve SPACE's sandboxes as MCP tools: over stdin/stdout with SPACE_API_KEY (default), or streamable HTTP at ADDR/mcp, each request with its own key (docs/mcp.md)",
			run:     mcpServe},
	)
}

func mcpServe(ctx context.Context, e *env, args []string) error {
	fs := newFlags("mcp")
	addr := fs.String("http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:7071) instead of stdio; every request needs Authorization: Bearer <SPACE API key>")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 0); err != nil {
		return err
	}
	cfg := mcpserver.Config{APIURL: e.apiURL}
	if *addr == "" {
		if e.apiKey == "" {
			return fmt.Errorf("no API key for the MCP tools: set SPACE_API_KEY (looked in %s)", e.keySource)
		}
		cfg.Key = e.apiKey
		// Standard output is the protocol's: nothing else is written there.
		return mcpserver.RunStdio(ctx, cfg)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("mcp: listen %s: %w", *addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpserver.HTTPHandler(cfg))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.stderr, "space mcp: serving http://%s/mcp for %s\n", ln.Addr(), e.apiURL)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return nil
	}
}
