package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/nodeclient"
)

// runNodeGC is `space node gc [--dry-run]`: the node running on this
// machine finds the executions its runtimes hold that no runtime record
// refers to, and the root volumes no runtime holds, and stops and cleans
// them (lists them with --dry-run). It
// talks to the node-api with the node's token, so it runs as the node's
// user (or root) on the node's machine.
func runNodeGC(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("node gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", "", "the node's data directory")
	addr := fs.String("node", "", "node-api address, unix:PATH or HOST:PORT (default unix:DATA/run/node.sock)")
	dryRun := fs.Bool("dry-run", false, "list the executions of no record, stop none")
	output := fs.String("o", "text", "output: text or json")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 || (*output != "text" && *output != "json") {
		if err == nil {
			fmt.Fprintln(stderr, "usage: space node gc [--data-dir DIR] [--node ADDR] [--dry-run] [-o json]")
		}
		return 2
	}
	dir, err := resolveDataDir(*dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "space node gc: %v\n", err)
		return 1
	}
	if *addr == "" {
		*addr = "unix:" + filepath.Join(dir, "run", "node.sock")
	}
	tok, err := os.ReadFile(filepath.Join(dir, "node.token"))
	if err != nil {
		fmt.Fprintf(stderr, "space node gc: the node's token: %v (run as the node's user, with --data-dir of the node)\n", err)
		return 1
	}
	c, err := nodeclient.New(*addr, strings.TrimSpace(string(tok)))
	if err != nil {
		fmt.Fprintf(stderr, "space node gc: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	found, err := c.CollectOrphans(ctx, *dryRun)
	if err != nil {
		fmt.Fprintf(stderr, "space node gc: %v (is `space node` running on %s?)\n", err, *addr)
		return 1
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(found)
	} else {
		printOrphans(stdout, stderr, found, *dryRun)
	}
	for _, o := range found.Orphans {
		if o.Error != "" {
			return 1
		}
	}
	return 0
}

// printOrphans writes one line per orphan: its id, runtime and what
// became of it.
func printOrphans(stdout, stderr io.Writer, found *nodev1.Orphans, dryRun bool) {
	for _, o := range found.Orphans {
		what, runtime := "stopped and cleaned up", o.Runtime
		if o.VolumeOnly {
			what, runtime = "root volume deleted", "(volume only)"
		}
		switch {
		case dryRun && o.VolumeOnly:
			what = "a root volume no runtime holds (--dry-run: left)"
		case dryRun:
			what = "no record (--dry-run: left running)"
		case o.Error != "":
			what = "cleanup failed: " + o.Error
		}
		fmt.Fprintf(stdout, "%s\t%s\t%s\n", o.ExecID, runtime, what)
	}
	if len(found.Orphans) == 0 {
		fmt.Fprintln(stderr, "no execution without a record")
	}
	if len(found.Pending) > 0 {
		fmt.Fprintf(stderr, "not looked at: the %s runtime is not ready yet\n", strings.Join(found.Pending, ", "))
	}
}
