package mcpserver

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	space "github.com/spacesandbox/space/sdk/go"
)

// registerCodeContexts adds the code context tools: a context is a kernel
// of its own in a code-interpreter sandbox, so an agent can keep two
// states apart (run_code's context argument) and reset one without
// touching the others.
func (t *tools) registerCodeContexts(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{Name: "code_context_create", Description: "Create a code context in a sandbox's code interpreter: a kernel of its own (python or bash) whose state no other context sees. Pass its id as run_code's context."},
		handler(t, func(ctx context.Context, c *space.Client, in ContextCreateArgs) (CodeContext, error) {
			if err := needID(in.ID); err != nil {
				return CodeContext{}, err
			}
			switch in.Language {
			case "", "python", "bash":
			default:
				return CodeContext{}, badArg("language", "want python or bash")
			}
			if in.Cwd != "" {
				if err := needPath(in.Cwd); err != nil {
					return CodeContext{}, badArg("cwd", "want an absolute path")
				}
			}
			cc, err := c.CreateCodeContext(ctx, in.ID, sandboxv1.CodeContextRequest{Language: in.Language, Cwd: in.Cwd})
			if err != nil {
				return CodeContext{}, err
			}
			return CodeContext{ID: cc.ID, Language: cc.Language, Cwd: cc.Cwd}, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "code_context_list", Description: "List the code contexts of a sandbox's code interpreter, the default ones included."},
		handler(t, func(ctx context.Context, c *space.Client, in IDArgs) (CodeContextList, error) {
			if err := needID(in.ID); err != nil {
				return CodeContextList{}, err
			}
			list, err := c.ListCodeContexts(ctx, in.ID)
			if err != nil {
				return CodeContextList{}, err
			}
			out := CodeContextList{Contexts: []CodeContext{}}
			for _, cc := range list {
				out.Contexts = append(out.Contexts, CodeContext{ID: cc.ID, Language: cc.Language, Cwd: cc.Cwd})
			}
			return out, nil
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "code_context_restart", Description: "Restart a code context: a fresh kernel under the same id, its state lost (the way out of a stuck or broken state)."},
		handler(t, func(ctx context.Context, c *space.Client, in ContextArgs) (ContextDone, error) {
			if err := needContext(in); err != nil {
				return ContextDone{}, err
			}
			return ContextDone{Context: in.Context}, c.RestartCodeContext(ctx, in.ID, in.Context)
		}))
	mcp.AddTool(s, &mcp.Tool{Name: "code_context_delete", Description: "Delete a code context and its kernel."},
		handler(t, func(ctx context.Context, c *space.Client, in ContextArgs) (ContextDone, error) {
			if err := needContext(in); err != nil {
				return ContextDone{}, err
			}
			return ContextDone{Context: in.Context}, c.DeleteCodeContext(ctx, in.ID, in.Context)
		}))
}

func needContext(in ContextArgs) error {
	if err := needID(in.ID); err != nil {
		return err
	}
	if strings.TrimSpace(in.Context) == "" {
		return badArg("context", "the code context id is required (code_context_list lists them)")
	}
	return nil
}
