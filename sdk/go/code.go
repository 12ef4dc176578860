package space

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// maxCodeEvent bounds one event of a RunCode stream (a result with a large
// PNG is one event).
const maxCodeEvent = 64 << 20

// RunCodeOptions are RunCode's optional settings and streaming callbacks.
type RunCodeOptions struct {
	// Language picks the language's default context: "python" (the
	// default) or "bash". Not with Context.
	Language string
	// Context runs the code in a context made by CreateCodeContext.
	Context string
	// Env is set for this execution only.
	Env map[string]string
	// Timeout interrupts the execution when it passes (the server's
	// default is 60s); the Execution then has a TimeoutError.
	Timeout time.Duration
	// Callbacks, called as the events arrive, in order.
	OnStdout func(text string)
	OnStderr func(text string)
	OnResult func(sandboxv1.CodeResult)
	OnError  func(sandboxv1.CodeError)
}

// Logs is what the code wrote, in the chunks it arrived in.
type Logs struct {
	Stdout []string
	Stderr []string
}

// Execution is the outcome of RunCode. An error in the code is not a Go
// error: check Error.
type Execution struct {
	Results        []sandboxv1.CodeResult
	Logs           Logs
	Error          *sandboxv1.CodeError
	ExecutionCount int
}

// Text is the main result's text (the value of the last expression), ""
// when there is none.
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.Main {
			return r.Text
		}
	}
	return ""
}

// RunCode runs code in the code interpreter of sandbox id (a sandbox of
// the code-interpreter template) and returns its results, logs and error,
// calling opts' callbacks as the events stream in.
func (c *Client) RunCode(ctx context.Context, id, code string, opts RunCodeOptions) (*Execution, error) {
	p, err := sandboxPath(id, "/code")
	if err != nil {
		return nil, fmt.Errorf("run code: %w", err)
	}
	req := sandboxv1.CodeRequest{Code: code, Language: opts.Language, Context: opts.Context, Env: opts.Env}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("run code in sandbox %s: timeout %s is negative", id, opts.Timeout)
	}
	if opts.Timeout > 0 {
		req.Timeout = opts.Timeout.String()
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("run code in sandbox %s: %w", id, err)
	}
	resp, err := c.send(ctx, request{method: http.MethodPost, path: p, body: strings.NewReader(string(b)), json: true})
	if err != nil {
		return nil, fmt.Errorf("run code in sandbox %s: %w", id, err)
	}
	defer resp.Body.Close()
	ex, err := readExecution(resp.Body, opts)
	if err != nil {
		return ex, fmt.Errorf("run code in sandbox %s: %w", id, err)
	}
	return ex, nil
}

// readExecution reads a RunCode stream up to its end event.
func readExecution(r io.Reader, opts RunCodeOptions) (*Execution, error) {
	ex := &Execution{}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readEventLine(br)
		if len(strings.TrimSpace(string(line))) > 0 {
			var ev sandboxv1.CodeEvent
			if jerr := json.Unmarshal(line, &ev); jerr != nil {
				return ex, fmt.Errorf("an event of the stream is not JSON: %w", jerr)
			}
			switch ev.Type {
			case sandboxv1.CodeEventStdout:
				ex.Logs.Stdout = append(ex.Logs.Stdout, ev.Text)
				if opts.OnStdout != nil {
					opts.OnStdout(ev.Text)
				}
			case sandboxv1.CodeEventStderr:
				ex.Logs.Stderr = append(ex.Logs.Stderr, ev.Text)
				if opts.OnStderr != nil {
					opts.OnStderr(ev.Text)
				}
			case sandboxv1.CodeEventResult:
				if ev.Result != nil {
					ex.Results = append(ex.Results, *ev.Result)
					if opts.OnResult != nil {
						opts.OnResult(*ev.Result)
					}
				}
			case sandboxv1.CodeEventError:
				if ev.Error != nil {
					ex.Error = ev.Error
					if opts.OnError != nil {
						opts.OnError(*ev.Error)
					}
				}
			case sandboxv1.CodeEventExecutionCount:
				ex.ExecutionCount = ev.ExecutionCount
			case sandboxv1.CodeEventEnd:
				return ex, nil
			}
		}
		if errors.Is(err, io.EOF) {
			return ex, errors.New("the stream ended before the execution's end event")
		} else if err != nil {
			return ex, err
		}
	}
}

// readEventLine reads one line of at most maxCodeEvent bytes.
func readEventLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxCodeEvent {
			return nil, fmt.Errorf("an event of the stream is over %d bytes", maxCodeEvent)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return line, err
	}
}

// CreateCodeContext makes a context in sandbox id's code interpreter: its
// own state, language ("python" or "bash") and working directory.
func (c *Client) CreateCodeContext(ctx context.Context, id string, req sandboxv1.CodeContextRequest) (*sandboxv1.CodeContext, error) {
	p, err := sandboxPath(id, "/code/contexts")
	if err != nil {
		return nil, fmt.Errorf("create code context: %w", err)
	}
	var out sandboxv1.CodeContext
	if err := c.call(ctx, request{method: http.MethodPost, path: p}, req, &out, maxErrorBody); err != nil {
		return nil, fmt.Errorf("create code context in sandbox %s: %w", id, err)
	}
	return &out, nil
}

// ListCodeContexts lists sandbox id's code interpreter contexts.
func (c *Client) ListCodeContexts(ctx context.Context, id string) ([]sandboxv1.CodeContext, error) {
	p, err := sandboxPath(id, "/code/contexts")
	if err != nil {
		return nil, fmt.Errorf("list code contexts: %w", err)
	}
	var out sandboxv1.CodeContextList
	if err := c.call(ctx, request{method: http.MethodGet, path: p}, nil, &out, 1<<20); err != nil {
		return nil, fmt.Errorf("list code contexts of sandbox %s: %w", id, err)
	}
	return out.Contexts, nil
}

// RestartCodeContext gives context contextID a fresh kernel (same id, its
// state lost).
func (c *Client) RestartCodeContext(ctx context.Context, id, contextID string) error {
	p, err := codeContextPath(id, contextID, "/restart")
	if err != nil {
		return fmt.Errorf("restart code context: %w", err)
	}
	if err := c.call(ctx, request{method: http.MethodPost, path: p}, nil, nil, 0); err != nil {
		return fmt.Errorf("restart code context %s of sandbox %s: %w", contextID, id, err)
	}
	return nil
}

// DeleteCodeContext removes context contextID.
func (c *Client) DeleteCodeContext(ctx context.Context, id, contextID string) error {
	p, err := codeContextPath(id, contextID, "")
	if err != nil {
		return fmt.Errorf("delete code context: %w", err)
	}
	if err := c.call(ctx, request{method: http.MethodDelete, path: p}, nil, nil, 0); err != nil {
		return fmt.Errorf("delete code context %s of sandbox %s: %w", contextID, id, err)
	}
	return nil
}

func codeContextPath(id, contextID, suffix string) (string, error) {
	seg, err := pathSegment("context id", contextID)
	if err != nil {
		return "", err
	}
	return sandboxPath(id, "/code/contexts/"+seg+suffix)
}
