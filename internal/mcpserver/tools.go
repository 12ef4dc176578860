package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"
)

// maxFileRead bounds what file_read returns: a model reads text, and a
// larger file is better fetched with the files API or a command.
const maxFileRead = 1 << 20

// maxFileWrite bounds file_write's decoded content.
const maxFileWrite = 8 << 20

// Sandbox is a sandbox as the tools report it.
type Sandbox struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	State     string `json:"state"`
	Reason    string `json:"reason,omitempty" jsonschema:"why it failed, when it did"`
	Template  string `json:"template"`
	Runtime   string `json:"runtime" jsonschema:"vm (a microVM with its own kernel) or ns (namespaces)"`
	CPUs      int    `json:"cpus"`
	MemoryMiB int    `json:"memory_mib"`
	CreatedAt string `json:"created_at"`
	ExpiresAt string `json:"expires_at,omitempty" jsonschema:"when the sandbox is deleted, if it has a timeout"`
}

func sandboxOf(sb *sandboxv1.Sandbox) Sandbox {
	out := Sandbox{ID: sb.ID, Name: sb.Name, State: string(sb.State), Reason: sb.Reason, Template: sb.Template,
		Runtime: sb.Runtime, CPUs: sb.CPUs, MemoryMiB: sb.MemoryMiB, CreatedAt: sb.CreatedAt.UTC().Format(time.RFC3339)}
	if sb.ExpiresAt != nil {
		out.ExpiresAt = sb.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return out
}

// The tools' arguments.
type (
	CreateArgs struct {
		Template  string            `json:"template,omitempty" jsonschema:"template name (default: the server's, usually base: Debian with python3, git, curl)"`
		Runtime   string            `json:"runtime,omitempty" jsonschema:"vm or ns (default: the server's choice)"`
		Timeout   string            `json:"timeout,omitempty" jsonschema:"a duration such as 30m or 2h after which the sandbox is deleted; empty: none"`
		Name      string            `json:"name,omitempty"`
		CPUs      int               `json:"cpus,omitempty"`
		MemoryMiB int               `json:"memory_mib,omitempty"`
		Env       map[string]string `json:"env,omitempty" jsonschema:"environment variables of every command"`
	}
	IDArgs struct {
		ID string `json:"id" jsonschema:"the sandbox id"`
	}
	RunArgs struct {
		ID      string            `json:"id" jsonschema:"the sandbox id"`
		Command string            `json:"command,omitempty" jsonschema:"a shell command line, run with sh -c"`
		Argv    []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell (instead of command)"`
		Cwd     string            `json:"cwd,omitempty"`
		Env     map[string]string `json:"env,omitempty"`
		User    string            `json:"user,omitempty"`
		Stdin   string            `json:"stdin,omitempty"`
		Timeout string            `json:"timeout,omitempty" jsonschema:"a duration such as 30s; the command is killed after it"`
	}
	CodeArgs struct {
		ID       string            `json:"id" jsonschema:"the sandbox id (a sandbox of the code-interpreter template)"`
		Code     string            `json:"code" jsonschema:"the code to run"`
		Language string            `json:"language,omitempty" jsonschema:"python (default) or bash: runs in that language's default context, which keeps its state across calls"`
		Context  string            `json:"context,omitempty" jsonschema:"a code context id to run in instead of the language's default one"`
		Env      map[string]string `json:"env,omitempty" jsonschema:"environment variables for this execution only"`
		Timeout  string            `json:"timeout,omitempty" jsonschema:"a duration such as 30s (default 60s); the code is interrupted after it"`
	}
	ContextCreateArgs struct {
		ID       string `json:"id" jsonschema:"the sandbox id (a sandbox of the code-interpreter template)"`
		Language string `json:"language,omitempty" jsonschema:"python (default) or bash"`
		Cwd      string `json:"cwd,omitempty" jsonschema:"the context's working directory, an absolute path (default: the interpreter's)"`
	}
	ContextArgs struct {
		ID      string `json:"id" jsonschema:"the sandbox id"`
		Context string `json:"context" jsonschema:"the code context id (code_context_list lists them)"`
	}
	FileArgs struct {
		ID   string `json:"id" jsonschema:"the sandbox id"`
		Path string `json:"path" jsonschema:"an absolute path in the sandbox"`
	}
	WriteArgs struct {
		ID       string `json:"id" jsonschema:"the sandbox id"`
		Path     string `json:"path" jsonschema:"an absolute path in the sandbox; parent directories are made"`
		Content  string `json:"content"`
		Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
	}
	ListArgs struct {
		ID    string `json:"id" jsonschema:"the sandbox id"`
		Path  string `json:"path" jsonschema:"an absolute directory path in the sandbox"`
		Depth int    `json:"depth,omitempty" jsonschema:"1 (default) lists the directory, 2 its subdirectories too, ..."`
	}
	PortArgs struct {
		ID       string `json:"id" jsonschema:"the sandbox id"`
		Port     int    `json:"port" jsonschema:"the port a server in the sandbox listens on"`
		Protocol string `json:"protocol,omitempty" jsonschema:"http (default) or tcp"`
		Public   bool   `json:"public,omitempty" jsonschema:"reachable by anyone with the URL; default private (needs the key or the returned token)"`
	}
	SnapshotArgs struct {
		ID   string `json:"id" jsonschema:"the sandbox id"`
		Kind string `json:"kind,omitempty" jsonschema:"disk (default: the filesystem) or full (memory too)"`
	}
	ForkArgs struct {
		ID       string `json:"id" jsonschema:"the sandbox id"`
		Snapshot string `json:"snapshot,omitempty" jsonschema:"start the fork from this snapshot of the sandbox instead of its current state"`
		Name     string `json:"name,omitempty"`
	}
)

// The tools' results.
type (
	SandboxList struct {
		Sandboxes []Sandbox `json:"sandboxes"`
	}
	Deleted struct {
		Deleted string `json:"deleted"`
	}
	RunResult struct {
		ExitCode  int    `json:"exit_code"`
		Stdout    string `json:"stdout"`
		Stderr    string `json:"stderr"`
		Truncated bool   `json:"truncated,omitempty" jsonschema:"the output was cut at the server's limit"`
	}
	CodeResult struct {
		Text           string               `json:"text" jsonschema:"the value of the last expression, as text"`
		Stdout         string               `json:"stdout"`
		Stderr         string               `json:"stderr"`
		Error          *sandboxv1.CodeError `json:"error,omitempty" jsonschema:"the code's error: its name, value and traceback"`
		Results        []CodeDisplay        `json:"results" jsonschema:"the displays and the last expression's value in every format the kernel gave (png, jpeg, pdf base64)"`
		ExecutionCount int                  `json:"execution_count"`
	}
	// CodeDisplay is sandboxv1.CodeResult with its JSON values decoded
	// (a json.RawMessage would have the schema of a byte array).
	CodeDisplay struct {
		Main       bool           `json:"main" jsonschema:"the value of the last expression (else a display)"`
		Text       string         `json:"text,omitempty"`
		HTML       string         `json:"html,omitempty"`
		Markdown   string         `json:"markdown,omitempty"`
		SVG        string         `json:"svg,omitempty"`
		PNG        string         `json:"png,omitempty"`
		JPEG       string         `json:"jpeg,omitempty"`
		PDF        string         `json:"pdf,omitempty"`
		LaTeX      string         `json:"latex,omitempty"`
		JavaScript string         `json:"javascript,omitempty"`
		JSON       any            `json:"json,omitempty"`
		Extra      map[string]any `json:"extra,omitempty" jsonschema:"formats without a field of their own, by MIME type"`
	}
	// CodeContext is a code interpreter context: its own kernel (or
	// bash), state and working directory.
	CodeContext struct {
		ID       string `json:"id" jsonschema:"pass it as run_code's context"`
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	CodeContextList struct {
		Contexts []CodeContext `json:"contexts"`
	}
	ContextDone struct {
		Context string `json:"context"`
	}
	FileContent struct {
		Path     string `json:"path"`
		Size     int    `json:"size"`
		Encoding string `json:"encoding" jsonschema:"utf-8, or base64 for content that is not UTF-8 text"`
		Content  string `json:"content"`
	}
	Written struct {
		Path  string `json:"path"`
		Bytes int    `json:"bytes"`
	}
	FileEntry struct {
		Path string `json:"path"`
		Type string `json:"type" jsonschema:"file, dir or symlink"`
		Size int64  `json:"size"`
	}
	FileList struct {
		Entries []FileEntry `json:"entries"`
	}
	Port struct {
		Port     int    `json:"port"`
		Protocol string `json:"protocol"`
		Public   bool   `json:"public"`
		URL      string `json:"url"`
		ProxyURL string `json:"proxy_url,omitempty"`
		Token    string `json:"token,omitempty" jsonschema:"a private port's access token: send it in X-Space-Port-Token"`
	}
	Snapshot struct {
		ID        string `json:"id"`
		Kind      string `json:"kind"`
		State     string `json:"state"`
		Reason    string `json:"reason,omitempty"`
		SizeBytes int64  `json:"size_bytes,omitempty"`
		CreatedAt string `json:"created_at"`
	}
	SnapshotList struct {
		Snapshots []Snapshot `json:"snapshots"`
	}
)

func snapshotOf(s sandboxv1.Snapshot) Snapshot {
	return Snapshot{ID: s.ID, Kind: s.Kind, State: s.State, Reason: s.Reason, SizeBytes: s.SizeBytes, CreatedAt: s.CreatedAt.UTC().Format(time.RFC3339)}
}

// badArg is a refusal of an argument, before anything is sent.
func badArg(field, why string) error { return fmt.Errorf("argument %s: %s", field, why) }

func needID(id string) error {
	if strings.TrimSpace(id) == "" {
		return badArg("id", "the sandbox id is required (sandbox_list lists them)")
	}
	return nil
}

func needPath(p string) error {
	if !strings.HasPrefix(p, "/") {
		return badArg("path", fmt.Sprintf("%q is not an absolute path", p))
	}
	return nil
}

// handler adapts a tool function to the SDK: validation and API errors
// become tool errors (IsError, the text the API gave), never protocol
// errors.
func handler[In, Out any](t *tools, fn func(ctx context.Context, c *space.Client, in In) (Out, error)) mcp.ToolHandlerFor[In, Out] {
	return func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		var zero Out
		c, err := t.client(req)
		if err != nil {
			return toolError(err), zero, nil
		}
		out, err := fn(ctx, c, in)
		if err != nil {
			return toolError(err), zero, nil
		}
		return nil, out, nil
	}
}

func toolError(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: ErrorText(err)}}}
}

// register adds every tool to s.
func (t *tools) register(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_create", Description: "Create a sandbox and wait until it runs. Returns its id, which every other tool takes."},
		handler(t, func(ctx context.Context, c *space.Client, in CreateArgs) (Sandbox, error) {
			if in.Timeout != "" {
				if _, err := time.ParseDuration(in.Timeout); err != nil {
					return Sandbox{}, badArg("timeout", fmt.Sprintf("%q is not a duration such as 30m", in.Timeout))
				}
			}
			if in.Runtime != "" && in.Runtime != "vm" && in.Runtime != "ns" {
				return Sandbox{}, badArg("runtime", fmt.Sprintf("%q: want vm or ns", in.Runtime))
			}
			sb, err := c.CreateSandbox(ctx, sandboxv1.CreateSandboxRequest{Template: in.Template, Runtime: in.Runtime, Timeout: in.Timeout,
				Name: in.Name, CPUs: in.CPUs, MemoryMiB: in.MemoryMiB, Env: in.Env})
			if err != nil {
				return Sandbox{}, err
			}
			if sb.State != sandboxv1.StateRunning {
				if sb, err = c.WaitForState(ctx, sb.ID, sandboxv1.StateRunning); err != nil {
					return Sandbox{}, fmt.Errorf("sandbox %s was created but did not start: %w", sb.ID, err)
				}
			}
			return sandboxOf(sb), nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_list", Description: "List the sandboxes of the API key's tenant."},
		handler(t, func(ctx context.Context, c *space.Client, _ struct{}) (SandboxList, error) {
			list, err := c.ListSandboxes(ctx)
			if err != nil {
				return SandboxList{}, err
			}
			out := SandboxList{Sandboxes: []Sandbox{}}
			for i := range list {
				out.Sandboxes = append(out.Sandboxes, sandboxOf(&list[i]))
			}
			return out, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_get", Description: "Get a sandbox's state."},
		handler(t, func(ctx context.Context, c *space.Client, in IDArgs) (Sandbox, error) {
			if err := needID(in.ID); err != nil {
				return Sandbox{}, err
			}
			sb, err := c.GetSandbox(ctx, in.ID)
			if err != nil {
				return Sandbox{}, err
			}
			return sandboxOf(sb), nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_delete", Description: "Delete a sandbox and everything in it."},
		handler(t, func(ctx context.Context, c *space.Client, in IDArgs) (Deleted, error) {
			if err := needID(in.ID); err != nil {
				return Deleted{}, err
			}
			return Deleted{Deleted: in.ID}, c.DeleteSandbox(ctx, in.ID)
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "run_command", Description: "Run a command in a sandbox to completion and return its exit code, standard output and standard error."},
		handler(t, func(ctx context.Context, c *space.Client, in RunArgs) (RunResult, error) {
			if err := needID(in.ID); err != nil {
				return RunResult{}, err
			}
			var argv []string
			switch {
			case in.Command != "" && len(in.Argv) > 0:
				return RunResult{}, badArg("argv", "give command or argv, not both")
			case in.Command != "":
				argv = []string{"sh", "-c", in.Command}
			case len(in.Argv) > 0 && in.Argv[0] != "":
				argv = in.Argv
			default:
				return RunResult{}, badArg("command", "a command line (or argv) is required")
			}
			if in.Timeout != "" {
				if _, err := time.ParseDuration(in.Timeout); err != nil {
					return RunResult{}, badArg("timeout", fmt.Sprintf("%q is not a duration such as 30s", in.Timeout))
				}
			}
			res, err := c.Exec(ctx, in.ID, sandboxv1.ExecRequest{Cmd: argv, Cwd: in.Cwd, Env: in.Env, User: in.User, Stdin: in.Stdin, Timeout: in.Timeout})
			if err != nil {
				return RunResult{}, err
			}
			return RunResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr, Truncated: res.Truncated}, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "run_code", Description: "Run code in a sandbox's code interpreter (a sandbox of the code-interpreter template; its state is kept across calls) and return its output, its results and its error. " +
		"When the call carries a progress token, stdout and stderr stream as progress notifications (message \"stdout: ...\" or \"stderr: ...\") as the code writes them."},
		func(ctx context.Context, req *mcp.CallToolRequest, in CodeArgs) (*mcp.CallToolResult, CodeResult, error) {
			c, err := t.client(req)
			if err != nil {
				return toolError(err), CodeResult{}, nil
			}
			out, err := runCode(ctx, c, req, in)
			if err != nil {
				return toolError(err), CodeResult{}, nil
			}
			return nil, out, nil
		})
	t.registerCodeContexts(s)
	mcp.AddTool(s, &mcp.Tool{Name: "file_read", Description: fmt.Sprintf("Read a file of a sandbox (at most %d bytes): UTF-8 text as it is, anything else base64.", maxFileRead)},
		handler(t, func(ctx context.Context, c *space.Client, in FileArgs) (FileContent, error) {
			if err := needID(in.ID); err != nil {
				return FileContent{}, err
			}
			if err := needPath(in.Path); err != nil {
				return FileContent{}, err
			}
			rc, err := c.ReadFile(ctx, in.ID, in.Path)
			if err != nil {
				return FileContent{}, err
			}
			defer rc.Close()
			b, err := io.ReadAll(io.LimitReader(rc, maxFileRead+1))
			if err != nil {
				return FileContent{}, fmt.Errorf("read %s: %w", in.Path, err)
			}
			if len(b) > maxFileRead {
				return FileContent{}, fmt.Errorf("%s is larger than %d bytes: read part of it with run_command (head, tail, sed -n)", in.Path, maxFileRead)
			}
			if utf8.Valid(b) {
				return FileContent{Path: in.Path, Size: len(b), Encoding: "utf-8", Content: string(b)}, nil
			}
			return FileContent{Path: in.Path, Size: len(b), Encoding: "base64", Content: base64.StdEncoding.EncodeToString(b)}, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "file_write", Description: "Write a file of a sandbox, replacing it whole."},
		handler(t, func(ctx context.Context, c *space.Client, in WriteArgs) (Written, error) {
			if err := needID(in.ID); err != nil {
				return Written{}, err
			}
			if err := needPath(in.Path); err != nil {
				return Written{}, err
			}
			data := []byte(in.Content)
			switch in.Encoding {
			case "", "utf-8":
			case "base64":
				var err error
				if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
					return Written{}, badArg("content", "not valid base64: "+err.Error())
				}
			default:
				return Written{}, badArg("encoding", fmt.Sprintf("%q: want utf-8 or base64", in.Encoding))
			}
			if len(data) > maxFileWrite {
				return Written{}, badArg("content", fmt.Sprintf("%d bytes is more than the %d this tool writes", len(data), maxFileWrite))
			}
			if err := c.WriteFile(ctx, in.ID, in.Path, bytes.NewReader(data)); err != nil {
				return Written{}, err
			}
			return Written{Path: in.Path, Bytes: len(data)}, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "file_list", Description: "List a directory of a sandbox."},
		handler(t, func(ctx context.Context, c *space.Client, in ListArgs) (FileList, error) {
			if err := needID(in.ID); err != nil {
				return FileList{}, err
			}
			if err := needPath(in.Path); err != nil {
				return FileList{}, err
			}
			if in.Depth < 0 || in.Depth > 8 {
				return FileList{}, badArg("depth", "want 1 to 8")
			}
			entries, err := c.ListFiles(ctx, in.ID, in.Path, max(in.Depth, 1))
			if err != nil {
				return FileList{}, err
			}
			out := FileList{Entries: []FileEntry{}}
			for _, e := range entries {
				out.Entries = append(out.Entries, FileEntry{Path: e.Path, Type: e.Type, Size: e.Size})
			}
			return out, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "port_expose", Description: "Expose a port of a sandbox and return the URL that reaches it."},
		handler(t, func(ctx context.Context, c *space.Client, in PortArgs) (Port, error) {
			if err := needID(in.ID); err != nil {
				return Port{}, err
			}
			if in.Port < 1 || in.Port > 65535 {
				return Port{}, badArg("port", fmt.Sprintf("%d is not a port (1–65535)", in.Port))
			}
			if in.Protocol != "" && in.Protocol != "http" && in.Protocol != "tcp" {
				return Port{}, badArg("protocol", fmt.Sprintf("%q: want http or tcp", in.Protocol))
			}
			p, err := c.ExposePort(ctx, in.ID, sandboxv1.ExposePortRequest{Port: in.Port, Protocol: in.Protocol, Public: in.Public})
			if err != nil {
				return Port{}, err
			}
			return Port{Port: p.Port, Protocol: p.Protocol, Public: p.Public, URL: p.URL, ProxyURL: p.ProxyURL, Token: p.Token}, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "snapshot_create", Description: "Snapshot a sandbox (its filesystem, or its memory too) and wait until the snapshot is ready."},
		handler(t, func(ctx context.Context, c *space.Client, in SnapshotArgs) (Snapshot, error) {
			if err := needID(in.ID); err != nil {
				return Snapshot{}, err
			}
			if in.Kind != "" && in.Kind != sandboxv1.SnapshotDisk && in.Kind != sandboxv1.SnapshotFull {
				return Snapshot{}, badArg("kind", fmt.Sprintf("%q: want disk or full", in.Kind))
			}
			snap, err := c.CreateSnapshot(ctx, in.ID, sandboxv1.CreateSnapshotRequest{Kind: in.Kind})
			if err != nil {
				return Snapshot{}, err
			}
			return waitSnapshot(ctx, c, in.ID, *snap)
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "snapshot_list", Description: "List a sandbox's snapshots."},
		handler(t, func(ctx context.Context, c *space.Client, in IDArgs) (SnapshotList, error) {
			if err := needID(in.ID); err != nil {
				return SnapshotList{}, err
			}
			list, err := c.ListSnapshots(ctx, in.ID)
			if err != nil {
				return SnapshotList{}, err
			}
			out := SnapshotList{Snapshots: []Snapshot{}}
			for _, s := range list {
				out.Snapshots = append(out.Snapshots, snapshotOf(s))
			}
			return out, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "sandbox_fork", Description: "Fork a sandbox: a new sandbox with a copy of its filesystem (and, on vm, its running processes), or of one of its snapshots."},
		handler(t, func(ctx context.Context, c *space.Client, in ForkArgs) (Sandbox, error) {
			if err := needID(in.ID); err != nil {
				return Sandbox{}, err
			}
			sb, err := c.ForkSandbox(ctx, in.ID, sandboxv1.ForkRequest{Snapshot: in.Snapshot, Name: in.Name})
			if err != nil {
				return Sandbox{}, err
			}
			if sb.State != sandboxv1.StateRunning {
				if sb, err = c.WaitForState(ctx, sb.ID, sandboxv1.StateRunning); err != nil {
					return Sandbox{}, fmt.Errorf("fork %s did not start: %w", sb.ID, err)
				}
			}
			return sandboxOf(sb), nil
		}))
	lifecycle := []struct {
		name, desc string
		call       func(*space.Client, context.Context, string, ...space.CallOption) (*sandboxv1.Sandbox, error)
		want       sandboxv1.State
	}{
		{"sandbox_hibernate", "Hibernate a sandbox: its state goes to the object store and it holds no memory or CPU until sandbox_restore.", (*space.Client).HibernateSandbox, sandboxv1.StateHibernated},
		{"sandbox_restore", "Restore a hibernated sandbox and wait until it runs.", (*space.Client).RestoreSandbox, sandboxv1.StateRunning},
		{"sandbox_pause", "Pause a running sandbox (its processes stop, its memory is kept).", (*space.Client).PauseSandbox, sandboxv1.StatePaused},
		{"sandbox_resume", "Resume a paused sandbox.", (*space.Client).ResumeSandbox, sandboxv1.StateRunning},
	}
	for _, l := range lifecycle {
		mcp.AddTool(s, &mcp.Tool{Name: l.name, Description: l.desc},
			handler(t, func(ctx context.Context, c *space.Client, in IDArgs) (Sandbox, error) {
				if err := needID(in.ID); err != nil {
					return Sandbox{}, err
				}
				sb, err := l.call(c, ctx, in.ID)
				if err != nil {
					return Sandbox{}, err
				}
				if sb.State != l.want {
					if sb, err = c.WaitForState(ctx, in.ID, l.want); err != nil {
						return Sandbox{}, err
					}
				}
				return sandboxOf(sb), nil
			}))
	}
}

// waitSnapshot waits until snapshot snap of sandbox id is no longer being
// taken; a failed one is an error with its reason.
func waitSnapshot(ctx context.Context, c *space.Client, id string, snap sandboxv1.Snapshot) (Snapshot, error) {
	for snap.State == "creating" {
		select {
		case <-ctx.Done():
			return Snapshot{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		list, err := c.ListSnapshots(ctx, id)
		if err != nil {
			return Snapshot{}, err
		}
		found := false
		for _, s := range list {
			if s.ID == snap.ID {
				snap, found = s, true
			}
		}
		if !found {
			return Snapshot{}, errors.New("snapshot " + snap.ID + " is gone")
		}
	}
	if snap.State == "failed" {
		return Snapshot{}, fmt.Errorf("snapshot %s failed: %s", snap.ID, snap.Reason)
	}
	return snapshotOf(snap), nil
}

// runCode runs run_code's code, sending each stdout and stderr chunk as a
// progress notification when the caller asked for progress.
func runCode(ctx context.Context, c *space.Client, req *mcp.CallToolRequest, in CodeArgs) (CodeResult, error) {
	if err := needID(in.ID); err != nil {
		return CodeResult{}, err
	}
	if in.Code == "" {
		return CodeResult{}, badArg("code", "the code to run is required")
	}
	if in.Language != "" && in.Context != "" {
		return CodeResult{}, badArg("context", "give language or context, not both (a context has its own language)")
	}
	var timeout time.Duration
	if in.Timeout != "" {
		d, err := time.ParseDuration(in.Timeout)
		if err != nil || d <= 0 {
			return CodeResult{}, badArg("timeout", fmt.Sprintf("%q is not a positive duration such as 30s", in.Timeout))
		}
		timeout = d
	}
	opts := space.RunCodeOptions{Language: in.Language, Context: in.Context, Env: in.Env, Timeout: timeout}
	if token := req.Params.GetProgressToken(); token != nil && req.Session != nil {
		var n float64
		progress := func(stream string) func(string) {
			return func(text string) {
				n++
				// A client gone away loses its notifications, not the run.
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: stream + ": " + text})
			}
		}
		opts.OnStdout, opts.OnStderr = progress("stdout"), progress("stderr")
	}
	ex, err := c.RunCode(ctx, in.ID, in.Code, opts)
	if err != nil {
		return CodeResult{}, err
	}
	out := CodeResult{Text: ex.Text(), Stdout: strings.Join(ex.Logs.Stdout, ""), Stderr: strings.Join(ex.Logs.Stderr, ""),
		Error: ex.Error, Results: []CodeDisplay{}, ExecutionCount: ex.ExecutionCount}
	for _, r := range ex.Results {
		d := CodeDisplay{Main: r.Main, Text: r.Text, HTML: r.HTML, Markdown: r.Markdown, SVG: r.SVG, PNG: r.PNG, JPEG: r.JPEG,
			PDF: r.PDF, LaTeX: r.LaTeX, JavaScript: r.JavaScript}
		if len(r.JSON) > 0 {
			if err := json.Unmarshal(r.JSON, &d.JSON); err != nil {
				return CodeResult{}, fmt.Errorf("run code: a result's json is not JSON: %w", err)
			}
		}
		for k, v := range r.Extra {
			var x any
			if err := json.Unmarshal(v, &x); err != nil {
				return CodeResult{}, fmt.Errorf("run code: a result's %s is not JSON: %w", k, err)
			}
			if d.Extra == nil {
				d.Extra = map[string]any{}
			}
			d.Extra[k] = x
		}
		out.Results = append(out.Results, d)
	}
	return out, nil
}
