package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

func init() {
	commands = append(commands,
		&command{path: "port expose", args: "ID PORT [--protocol http|tcp] [--public] [-o json]",
			summary: "expose a sandbox port; prints the URL that reaches it (and, for a private port, its token on stderr)", run: portExpose},
		&command{path: "port list", args: "ID [-o json]", summary: "list a sandbox's exposed ports and their URLs", run: portList},
		&command{path: "port unexpose", args: "ID PORT", summary: "stop exposing a sandbox port", run: portUnexpose},
		&command{path: "port forward", args: "ID PORT [--local ADDR]",
			summary: "forward a local TCP address to an exposed tcp port of a sandbox; prints the local address", run: portForward},
	)
}

// portArg reads a PORT argument.
func portArg(fs *flag.FlagSet, s string) (int, error) {
	port, err := strconv.Atoi(s)
	if err != nil || port < 1 || port > 65535 {
		return 0, usagef(fs, "PORT %q: want a number from 1 to 65535", s)
	}
	return port, nil
}

func portExpose(ctx context.Context, e *env, args []string) error {
	fs := newFlags("port expose")
	protocol := fs.String("protocol", "http", "http or tcp")
	public := fs.Bool("public", false, "reachable without credentials (default: the tenant's API key or the port's token is needed)")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 2, 2, "ID", "PORT"); err != nil {
		return err
	}
	port, err := portArg(fs, pos[1])
	if err != nil {
		return err
	}
	if *protocol != "http" && *protocol != "tcp" {
		return usagef(fs, "--protocol %q: want http or tcp", *protocol)
	}
	sp, err := e.c.ExposePort(ctx, pos[0], sandboxv1.ExposePortRequest{Port: port, Protocol: *protocol, Public: *public})
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sp)
	}
	if sp.Token != "" {
		fmt.Fprintf(e.stderr, "token: %s\n(private port: send it in the %s header or the %s query parameter, or use the API key)\n",
			printable(sp.Token), sandboxv1.PortTokenHeader, sandboxv1.PortTokenQuery)
	}
	return writeLine(e.stdout, sp.URL)
}

func portList(ctx context.Context, e *env, args []string) error {
	id, out, err := oneArgOutput("port list", "ID", args)
	if err != nil {
		return err
	}
	list, err := e.c.ListPorts(ctx, id)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.ServicePortList{Ports: nonNil(list)})
	}
	rows := make([][]string, 0, len(list))
	for _, p := range list {
		port, access := strconv.Itoa(p.Port), "private"
		if p.Public {
			access = "public"
		}
		if p.Port == 0 {
			// The rule of a sandbox made through the E2B API for every HTTP
			// port not exposed otherwise (docs/e2b.md).
			port = "*"
			if !p.Public {
				access = "private (E2B traffic token)"
			}
		}
		rows = append(rows, []string{port, p.Protocol, access, p.URL})
	}
	return writeTable(e.stdout, []string{"PORT", "PROTOCOL", "ACCESS", "URL"}, rows)
}

func portUnexpose(ctx context.Context, e *env, args []string) error {
	fs := newFlags("port unexpose")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 2, 2, "ID", "PORT"); err != nil {
		return err
	}
	port, err := portArg(fs, pos[1])
	if err != nil {
		return err
	}
	return e.c.UnexposePort(ctx, pos[0], port)
}

// portForward listens on a local address and tunnels every connection
// accepted there to the sandbox port, until interrupted.
func portForward(ctx context.Context, e *env, args []string) error {
	fs := newFlags("port forward")
	local := fs.String("local", "127.0.0.1:0", "local address to listen on")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 2, 2, "ID", "PORT"); err != nil {
		return err
	}
	port, err := portArg(fs, pos[1])
	if err != nil {
		return err
	}
	id := pos[0]
	if err := checkTCPPort(ctx, e, id, port); err != nil {
		return err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", *local)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *local, err)
	}
	defer ln.Close()
	if err := writeLine(e.stdout, ln.Addr().String()); err != nil {
		return err
	}
	return forward(ctx, ln, func(ctx context.Context) (net.Conn, error) { return e.c.DialPort(ctx, id, port) },
		func(err error) { fmt.Fprintf(e.stderr, "space: port forward: %s\n", e.message(err)) })
}

// checkTCPPort fails unless the sandbox exposes port as tcp.
func checkTCPPort(ctx context.Context, e *env, id string, port int) error {
	list, err := e.c.ListPorts(ctx, id)
	if err != nil {
		return err
	}
	for _, p := range list {
		if p.Port != port {
			continue
		}
		if p.Protocol != "tcp" {
			return fmt.Errorf("port %d of sandbox %s is exposed as %s; use its URL (space port list %s), or expose it with --protocol tcp", port, id, p.Protocol, id)
		}
		return nil
	}
	return fmt.Errorf("port %d of sandbox %s is not exposed; run: space port expose %s %d --protocol tcp", port, id, id, port)
}

// forward accepts connections on ln until ctx ends, and relays each to a
// tunnel from dial; failures of one connection are reported and do not
// stop the others. It returns once every relay has ended.
func forward(ctx context.Context, ln net.Listener, dial func(context.Context) (net.Conn, error), report func(error)) error {
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		wg.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			remote, err := dial(ctx)
			if err != nil {
				report(err)
				return
			}
			defer remote.Close()
			relayConns(ctx, c, remote)
		}()
	}
}

// relayConns copies both ways until both directions end or ctx does,
// passing a clean end of one direction on as a half-close.
func relayConns(ctx context.Context, a, b net.Conn) {
	stop := context.AfterFunc(ctx, func() { a.Close(); b.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		if _, err := io.Copy(dst, src); err != nil {
			a.Close()
			b.Close()
		} else if cw, ok := dst.(interface{ CloseWrite() error }); !ok || cw.CloseWrite() != nil {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(b, a)
	go pipe(a, b)
	<-done
	<-done
}
