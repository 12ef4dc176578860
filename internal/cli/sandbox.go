package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"
)

// defaultWait bounds how long a command waits for a sandbox to reach its state.
const defaultWait = 10 * time.Minute

func init() {
	commands = append(commands,
		&command{path: "sandbox create", args: "[--template T] [--runtime vm|ns] [--cpus N] [--memory MiB] [--disk MiB] [--env K=V]… [--timeout DUR] [--egress FILE] [--project P] [--name N] [-o json]",
			summary: "create a sandbox; prints its id once it is running", run: sandboxCreate},
		&command{path: "sandbox list", args: "[--state S] [--template T] [--name N] [--metadata K=V]... [-o json]", summary: "list sandboxes, filtered by the server", run: sandboxList},
		&command{path: "sandbox get", args: "ID [-o json]", summary: "show a sandbox", run: sandboxGet},
	)
	for _, l := range lifecycleVerbs {
		commands = append(commands, &command{path: "sandbox " + l.verb, args: "ID [--wait DUR] [-o json]",
			summary: fmt.Sprintf("%s a sandbox and wait until it is %s", l.verb, l.target), run: l.run})
	}
	commands = append(commands,
		&command{path: "sandbox delete", args: "ID [--wait DUR]", summary: "delete a sandbox and wait until it is gone", run: sandboxDelete},
		&command{path: "sandbox fork", args: "ID [--snapshot S] [--name N] [--wait DUR] [-o json]", summary: "fork a sandbox; prints the new sandbox id", run: sandboxFork},
		&command{path: "sandbox rollback", args: "ID --snapshot S [--wait DUR] [-o json]", summary: "put the filesystem back to a snapshot and start a new execution", run: sandboxRollback},
		&command{path: "snapshot create", args: "ID [--kind disk|full] [-o json]", summary: "snapshot a sandbox; prints the snapshot id", run: snapshotCreate},
		&command{path: "sandbox timeout", args: "ID DURATION [-o json]", summary: "make the sandbox live DURATION from now (0: no timeout)", run: sandboxTimeout},
		&command{path: "sandbox events", args: "ID [-o json]", summary: "show a sandbox's history (state changes, snapshots, failures)", run: sandboxEvents},
		&command{path: "snapshot delete", args: "ID SNAPSHOT", summary: "delete a snapshot of a sandbox", run: snapshotDelete},
		&command{path: "snapshot list", args: "ID [-o json]", summary: "list a sandbox's snapshots", run: snapshotList},
	)
}

func sandboxCreate(ctx context.Context, e *env, args []string) error {
	fs := newFlags("sandbox create")
	var req sandboxv1.CreateSandboxRequest
	env := kvFlag{}
	fs.StringVar(&req.Template, "template", "", "template (default: the server's, base)")
	fs.StringVar(&req.Runtime, "runtime", "", "runtime: vm or ns (default: the server's choice)")
	fs.IntVar(&req.CPUs, "cpus", 0, "virtual CPUs (default 1)")
	fs.IntVar(&req.MemoryMiB, "memory", 0, "memory in MiB (default 512)")
	fs.IntVar(&req.DiskMiB, "disk", 0, "disk in MiB (default 2048)")
	fs.Var(env, "env", "environment variable K=V (repeatable)")
	timeout := fs.String("timeout", "", "delete the sandbox after this duration, e.g. 30m")
	egress := fs.String("egress", "", "JSON egress policy file, - for stdin (default: the server's, {\"allow_internet\": true} unless set otherwise); see docs/network.md")
	fs.StringVar(&req.Name, "name", "", "sandbox name")
	fs.StringVar(&req.Project, "project", "", "project of the sandbox: credentials scoped to it apply (docs/credentials.md)")
	fs.StringVar(&req.IdleTimeout, "idle-timeout", "", "pause (or hibernate, --idle-action) the sandbox after this long without a request, e.g. 10m; the next request resumes it")
	fs.StringVar(&req.IdleAction, "idle-action", "", "what idleness does: pause (default) or hibernate")
	wait := durationFlag(fs, "wait", defaultWait, "how long to wait for the sandbox to run")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 0); err != nil {
		return err
	}
	if req.Runtime != "" && req.Runtime != "vm" && req.Runtime != "ns" {
		return usagef(fs, "--runtime %q: want vm or ns", req.Runtime)
	}
	if req.CPUs < 0 || req.MemoryMiB < 0 || req.DiskMiB < 0 {
		return usagef(fs, "--cpus, --memory and --disk must not be negative")
	}
	if *timeout != "" {
		if d, err := time.ParseDuration(*timeout); err != nil || d <= 0 {
			return usagef(fs, "--timeout %q: want a positive duration such as 30m", *timeout)
		}
		req.Timeout = *timeout
	}
	if *egress != "" {
		if req.Egress, err = readEgressPolicy(e, *egress); err != nil {
			return fmt.Errorf("--egress %s: %w", *egress, err)
		}
	}
	if len(env) > 0 {
		req.Env = env
	}
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	sb, err := e.c.CreateSandbox(ctx, req)
	if err != nil {
		return err
	}
	if sb.State != sandboxv1.StateRunning {
		if sb, err = e.c.WaitForState(ctx, sb.ID, sandboxv1.StateRunning); err != nil {
			return err
		}
	}
	if sb.Runtime == "ns" && req.Runtime == "" {
		// Chosen by the server, not asked for: say what it means.
		fmt.Fprintln(e.stderr, "space: warning: this sandbox runs on the ns runtime, which shares the host kernel; --runtime vm gives it its own kernel where QEMU is installed")
	}
	if out.json() {
		return writeJSON(e.stdout, sb)
	}
	return writeLine(e.stdout, sb.ID)
}

func sandboxList(ctx context.Context, e *env, args []string) error {
	fs := newFlags("sandbox list")
	var f space.SandboxFilter
	meta := kvFlag{}
	state := fs.String("state", "", "only sandboxes in this state (running, paused, hibernated, ...)")
	fs.StringVar(&f.Template, "template", "", "only sandboxes of this template")
	fs.StringVar(&f.Name, "name", "", "only the sandbox of this name")
	fs.Var(meta, "metadata", "only sandboxes whose metadata has K=V (repeatable: all must match)")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 0, 0); err != nil {
		return err
	}
	f.State, f.Metadata = sandboxv1.State(*state), meta
	list, err := e.c.ListSandboxesFiltered(ctx, f)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.SandboxList{Sandboxes: nonNil(list)})
	}
	rows := make([][]string, 0, len(list))
	for _, sb := range list {
		rows = append(rows, []string{sb.ID, string(sb.State), sb.Template, sb.Runtime, sb.Node, formatTime(sb.CreatedAt)})
	}
	return writeTable(e.stdout, []string{"ID", "STATE", "TEMPLATE", "RUNTIME", "NODE", "CREATED"}, rows)
}

func sandboxGet(ctx context.Context, e *env, args []string) error {
	arg, out, err := oneArgOutput("sandbox get", "ID", args)
	if err != nil {
		return err
	}
	sb, err := e.c.GetSandbox(ctx, arg)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sb)
	}
	return printSandbox(e, sb)
}

// printSandbox prints a sandbox as "field value" rows.
func printSandbox(e *env, sb *sandboxv1.Sandbox) error {
	expires := "-"
	if sb.ExpiresAt != nil {
		expires = formatTime(*sb.ExpiresAt)
	}
	rows := [][]string{
		{"id", sb.ID}, {"name", sb.Name}, {"tenant", sb.Tenant}, {"state", string(sb.State)},
		{"reason", sb.Reason}, {"template", sb.Template}, {"runtime", sb.Runtime},
		{"generation", strconv.FormatUint(sb.Generation, 10)}, {"node", sb.Node},
		{"cpus", strconv.Itoa(sb.CPUs)}, {"memory_mib", strconv.Itoa(sb.MemoryMiB)},
		{"disk_mib", strconv.Itoa(sb.DiskMiB)}, {"created_at", formatTime(sb.CreatedAt)},
		{"expires_at", expires},
	}
	if sb.Egress != nil {
		b, err := json.Marshal(sb.Egress)
		if err != nil {
			return fmt.Errorf("encode egress policy: %w", err)
		}
		rows = append(rows, []string{"egress", string(b)})
	}
	return writeTable(e.stdout, []string{"FIELD", "VALUE"}, rows)
}

// lifecycleVerb is a sandbox operation that moves it to a target state.
type lifecycleVerb struct {
	verb   string
	target sandboxv1.State
	call   func(c *space.Client, ctx context.Context, id string, opts ...space.CallOption) (*sandboxv1.Sandbox, error)
}

// lifecycleVerbs lists the operations `space sandbox VERB ID` waits through.
var lifecycleVerbs = []lifecycleVerb{
	{"pause", sandboxv1.StatePaused, (*space.Client).PauseSandbox},
	{"resume", sandboxv1.StateRunning, (*space.Client).ResumeSandbox},
	{"hibernate", sandboxv1.StateHibernated, (*space.Client).HibernateSandbox},
	{"restore", sandboxv1.StateRunning, (*space.Client).RestoreSandbox},
	{"stop", sandboxv1.StateStopped, (*space.Client).StopSandbox},
	{"start", sandboxv1.StateRunning, (*space.Client).StartSandbox},
}

// run performs the operation and waits for its target state.
func (l lifecycleVerb) run(ctx context.Context, e *env, args []string) error {
	fs := newFlags("sandbox " + l.verb)
	wait := durationFlag(fs, "wait", defaultWait, "how long to wait for the target state")
	var node string
	if l.verb == "restore" {
		fs.StringVar(&node, "node", "", "restore on this node (admin key; default: the scheduler's choice)")
	}
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "ID"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	call := l.call
	if node != "" {
		call = func(c *space.Client, ctx context.Context, id string, opts ...space.CallOption) (*sandboxv1.Sandbox, error) {
			return c.RestoreSandboxOn(ctx, id, node, opts...)
		}
	}
	var moves *eventProgress
	if l.verb == "hibernate" || l.verb == "restore" {
		// These move a snapshot through object storage: show its bytes.
		moves = newEventProgress(ctx, e, pos[0])
	}
	sb, err := call(e.c, ctx, pos[0])
	if err != nil {
		return err
	}
	switch {
	case moves != nil:
		// Also when the call waited itself: the readings are in the events.
		if sb, err = moves.waitShowingProgress(ctx, l.target); err != nil {
			return err
		}
	case sb.State != l.target:
		if sb, err = e.c.WaitForState(ctx, pos[0], l.target); err != nil {
			return err
		}
	}
	if out.json() {
		return writeJSON(e.stdout, sb)
	}
	return nil
}

func sandboxDelete(ctx context.Context, e *env, args []string) error {
	fs := newFlags("sandbox delete")
	wait := durationFlag(fs, "wait", defaultWait, "how long to wait for the sandbox to be gone")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "ID"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	if err := e.c.DeleteSandbox(ctx, pos[0]); err != nil {
		return err
	}
	return e.c.WaitDeleted(ctx, pos[0])
}

func sandboxFork(ctx context.Context, e *env, args []string) error {
	fs := newFlags("sandbox fork")
	var req sandboxv1.ForkRequest
	fs.StringVar(&req.Snapshot, "snapshot", "", "fork from this snapshot (default: the current filesystem)")
	fs.StringVar(&req.Name, "name", "", "name of the new sandbox")
	wait := durationFlag(fs, "wait", defaultWait, "how long to wait for the new sandbox to run")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "ID"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	sb, err := e.c.ForkSandbox(ctx, pos[0], req)
	if err != nil {
		return err
	}
	return e.finishRunning(ctx, sb, out, true)
}

func sandboxRollback(ctx context.Context, e *env, args []string) error {
	fs := newFlags("sandbox rollback")
	snapshot := fs.String("snapshot", "", "snapshot to go back to (required)")
	wait := durationFlag(fs, "wait", defaultWait, "how long to wait for the sandbox to run again")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "ID"); err != nil {
		return err
	}
	if *snapshot == "" {
		return usagef(fs, "missing --snapshot")
	}
	ctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	sb, err := e.c.RollbackSandbox(ctx, pos[0], *snapshot)
	if err != nil {
		return err
	}
	return e.finishRunning(ctx, sb, out, false)
}

// finishRunning waits for sb to run, then prints it as JSON, or its id when
// printID is set.
func (e *env) finishRunning(ctx context.Context, sb *sandboxv1.Sandbox, out *outputFormat, printID bool) error {
	var err error
	if sb.State != sandboxv1.StateRunning {
		if sb, err = e.c.WaitForState(ctx, sb.ID, sandboxv1.StateRunning); err != nil {
			return err
		}
	}
	switch {
	case out.json():
		return writeJSON(e.stdout, sb)
	case printID:
		return writeLine(e.stdout, sb.ID)
	}
	return nil
}

func snapshotCreate(ctx context.Context, e *env, args []string) error {
	fs := newFlags("snapshot create")
	var req sandboxv1.CreateSnapshotRequest
	fs.StringVar(&req.Kind, "kind", sandboxv1.SnapshotDisk, "disk or full")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "ID"); err != nil {
		return err
	}
	if req.Kind != sandboxv1.SnapshotDisk && req.Kind != sandboxv1.SnapshotFull {
		return usagef(fs, "--kind %q: want disk or full", req.Kind)
	}
	snap, err := e.c.CreateSnapshot(ctx, pos[0], req)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, snap)
	}
	return writeLine(e.stdout, snap.ID)
}

func snapshotList(ctx context.Context, e *env, args []string) error {
	arg, out, err := oneArgOutput("snapshot list", "ID", args)
	if err != nil {
		return err
	}
	list, err := e.c.ListSnapshots(ctx, arg)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.SnapshotList{Snapshots: nonNil(list)})
	}
	rows := make([][]string, 0, len(list))
	for _, s := range list {
		rows = append(rows, []string{s.ID, s.Kind, s.Tier, formatTime(s.CreatedAt), s.State})
	}
	return writeTable(e.stdout, []string{"ID", "KIND", "TIER", "CREATED", "STATE"}, rows)
}

// nonNil returns s, or an empty slice for nil, so JSON shows [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func sandboxEvents(ctx context.Context, e *env, args []string) error {
	arg, out, err := oneArgOutput("sandbox events", "ID", args)
	if err != nil {
		return err
	}
	list, err := e.c.ListEvents(ctx, arg)
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sandboxv1.EventList{Events: nonNil(list)})
	}
	rows := make([][]string, 0, len(list))
	for _, ev := range list {
		rows = append(rows, []string{strconv.FormatInt(ev.Seq, 10), formatTime(ev.Time), ev.Type, ev.Message})
	}
	return writeTable(e.stdout, []string{"SEQ", "TIME", "TYPE", "MESSAGE"}, rows)
}

func sandboxTimeout(ctx context.Context, e *env, args []string) error {
	fs := newFlags("sandbox timeout")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 2, 2, "ID", "DURATION"); err != nil {
		return err
	}
	sb, err := e.c.SetTimeout(ctx, pos[0], pos[1])
	if err != nil {
		return err
	}
	if out.json() {
		return writeJSON(e.stdout, sb)
	}
	if sb.ExpiresAt == nil {
		return writeLine(e.stdout, "no timeout")
	}
	return writeLine(e.stdout, formatTime(*sb.ExpiresAt))
}

func snapshotDelete(ctx context.Context, e *env, args []string) error {
	fs := newFlags("snapshot delete")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 2, 2, "ID", "SNAPSHOT"); err != nil {
		return err
	}
	return e.c.DeleteSnapshot(ctx, pos[0], pos[1])
}
