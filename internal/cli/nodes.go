package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// The node commands are "nodes …": "space node" is the node daemon
// (cmd/space), and stays so.
func init() {
	commands = append(commands,
		&command{path: "nodes list", args: "[-o json]",
			summary: "list nodes: state, liveness, runtimes, sandboxes still on each, warm pool ready, memory committed of allowed and available of total, memory pressure (admin key)", run: nodesList},
		&command{path: "nodes drain", args: "ID [-o json]",
			summary: "drain a node: place nothing more on it and move its running and paused sandboxes to other nodes (admin key)", run: nodesDrain},
		&command{path: "nodes undrain", args: "ID [-o json]", summary: "return a draining node to ready (admin key)", run: nodesUndrain},
	)
}

func nodesList(ctx context.Context, e *env, args []string) error {
	out, err := listFlags("nodes list", args)
	if err != nil {
		return err
	}
	list, err := e.c.ListNodes(ctx)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.NodeList{Nodes: nonNil(list)})
	}
	rows := make([][]string, 0, len(list))
	for _, n := range list {
		rows = append(rows, nodeRow(n))
	}
	return writeTable(e.stdout, []string{"ID", "STATE", "LIVE", "RUNTIMES", "SANDBOXES", "STOPPED-HERE", "WARM-READY", "COMMITTED", "AVAILABLE", "STATUS"}, rows)
}

func nodeRow(n sandboxv1.Node) []string {
	ready := 0
	for _, p := range n.WarmPool {
		ready += p.Ready
	}
	return []string{
		printable(n.ID), printable(n.State), strconv.FormatBool(n.Live), printable(strings.Join(n.Runtimes, ",")),
		strconv.Itoa(n.Sandboxes), strconv.Itoa(len(n.StoppedOnNode)), strconv.Itoa(ready),
		fmt.Sprintf("%d/%d MiB", n.CommittedMiB, n.MemoryLimitMiB), availableText(n),
		printable(nodeStatusText(n)),
	}
}

// availableText is a node's measured MemAvailable of MemTotal, or "-"
// when it reports none.
func availableText(n sandboxv1.Node) string {
	if !n.MemoryMeasured {
		return "-"
	}
	return fmt.Sprintf("%d/%d MiB", n.AvailableMiB, n.MemoryTotalMiB)
}

// nodeStatusText is a node's memory pressure, if any, then its runtime
// status lines.
func nodeStatusText(n sandboxv1.Node) string {
	st := runtimeStatusText(n.RuntimeStatus)
	if n.MemoryPressure == "" {
		return st
	}
	if st == "-" {
		return "memory pressure: " + n.MemoryPressure
	}
	return "memory pressure: " + n.MemoryPressure + "; " + st
}

// runtimeStatusText is a node's runtime status lines in one cell, by
// runtime name ("vm: q35 …; ns: …"), or "-".
func runtimeStatusText(status map[string]string) string {
	if len(status) == 0 {
		return "-"
	}
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(status)) {
		parts = append(parts, name+": "+status[name])
	}
	return strings.Join(parts, "; ")
}

func nodesDrain(ctx context.Context, e *env, args []string) error {
	return nodeSetState(ctx, e, "nodes drain", args, true)
}

func nodesUndrain(ctx context.Context, e *env, args []string) error {
	return nodeSetState(ctx, e, "nodes undrain", args, false)
}

func nodeSetState(ctx context.Context, e *env, name string, args []string, drain bool) error {
	fs := newFlags(name)
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "ID"); err != nil {
		return err
	}
	var n *sandboxv1.Node
	if drain {
		n, err = e.c.DrainNode(ctx, pos[0])
	} else {
		n, err = e.c.UndrainNode(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, n)
	}
	fmt.Fprintf(e.stdout, "node %s is %s; %d sandboxes on it\n", printable(n.ID), printable(n.State), n.Sandboxes)
	if drain && len(n.StoppedOnNode) > 0 {
		fmt.Fprintf(e.stdout, "stopped sandboxes whose disk lives only on it (not moved; start them there or delete them): %s\n",
			printable(strings.Join(n.StoppedOnNode, " ")))
	}
	return nil
}
