package restapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

const (
	// defaultCodeTimeout applies when a code request names none.
	defaultCodeTimeout = 60 * time.Second
	// maxCodeLine bounds one line of the interpreter's stream (a result
	// with a large PNG is one line).
	maxCodeLine = 64 << 20
)

var codeEnvName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// errNoInterpreter is the answer for a sandbox where nothing serves the
// code interpreter's port.
func errNoInterpreter(sb *sandbox.Sandbox) error {
	return fmt.Errorf("%w: sandbox %s (template %q) has no code interpreter on port %d: run code in a sandbox of the code-interpreter template (space template build code-interpreter --from builtin:code-interpreter, then create the sandbox with --template code-interpreter)",
		errdefs.ErrFailedPrecondition, sb.ID, sb.Template, sandboxv1.CodeInterpreterPort)
}

// interpreterExecute is the code interpreter server's /execute body for
// req, and req's timeout.
func interpreterExecute(req *sandboxv1.CodeRequest) ([]byte, time.Duration, error) {
	if req.Context != "" && req.Language != "" {
		return nil, 0, fmt.Errorf("%w: give context or language, not both (a context has its language)", errdefs.ErrInvalidArgument)
	}
	for k, v := range req.Env {
		if !codeEnvName.MatchString(k) || strings.ContainsRune(v, 0) {
			return nil, 0, fmt.Errorf("%w: env %q: want a name of letters, digits and _ and a value without NUL", errdefs.ErrInvalidArgument, clip(k))
		}
	}
	timeout := defaultCodeTimeout
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 || d > maxExecTimeout {
			return nil, 0, fmt.Errorf("%w: timeout %q: want a Go duration between 0 and %s", errdefs.ErrInvalidArgument, clip(req.Timeout), maxExecTimeout)
		}
		timeout = d
	}
	body := map[string]any{"code": req.Code}
	if req.Language != "" {
		body["language"] = req.Language
	}
	if req.Context != "" {
		body["context_id"] = req.Context
	}
	if len(req.Env) > 0 {
		body["env_vars"] = req.Env
	}
	b, err := json.Marshal(body)
	return b, timeout, err
}

// resultKeys are the interpreter's result fields that CodeResult names.
var resultKeys = map[string]bool{"type": true, "is_main_result": true, "text": true, "html": true, "markdown": true,
	"svg": true, "png": true, "jpeg": true, "pdf": true, "latex": true, "javascript": true, "json": true}

// codeEvent maps one line of the interpreter's stream to SPACE's event;
// ok is false for a line SPACE does not pass on (a type it does not know).
func codeEvent(line []byte) (ev sandboxv1.CodeEvent, ok bool, err error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return ev, false, fmt.Errorf("the code interpreter sent a line that is not a JSON object: %w", err)
	}
	var typ string
	if err := json.Unmarshal(raw["type"], &typ); err != nil {
		return ev, false, fmt.Errorf("the code interpreter sent a line without a type: %.80s", line)
	}
	var m struct {
		Text           string `json:"text"`
		Name           string `json:"name"`
		Value          string `json:"value"`
		Traceback      string `json:"traceback"`
		ExecutionCount int    `json:"execution_count"`
		sandboxv1.CodeResult
		IsMain bool `json:"is_main_result"`
	}
	if typ != "result" {
		if err := json.Unmarshal(line, &m); err != nil {
			return ev, false, fmt.Errorf("the code interpreter's %s line: %w", clip(typ), err)
		}
	}
	switch typ {
	case "stdout", "stderr":
		return sandboxv1.CodeEvent{Type: typ, Text: m.Text}, true, nil
	case "error":
		return sandboxv1.CodeEvent{Type: sandboxv1.CodeEventError, Error: &sandboxv1.CodeError{Name: m.Name, Value: m.Value, Traceback: m.Traceback}}, true, nil
	case "number_of_executions":
		return sandboxv1.CodeEvent{Type: sandboxv1.CodeEventExecutionCount, ExecutionCount: m.ExecutionCount}, true, nil
	case "end_of_execution":
		return sandboxv1.CodeEvent{Type: sandboxv1.CodeEventEnd}, true, nil
	case "result":
		var res sandboxv1.CodeResult
		for k, v := range raw {
			if !resultKeys[k] {
				if res.Extra == nil {
					res.Extra = map[string]json.RawMessage{}
				}
				res.Extra[k] = v
			}
		}
		var r struct {
			IsMain     bool            `json:"is_main_result"`
			Text       string          `json:"text"`
			HTML       string          `json:"html"`
			Markdown   string          `json:"markdown"`
			SVG        string          `json:"svg"`
			PNG        string          `json:"png"`
			JPEG       string          `json:"jpeg"`
			PDF        string          `json:"pdf"`
			LaTeX      string          `json:"latex"`
			JavaScript string          `json:"javascript"`
			JSON       json.RawMessage `json:"json"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return ev, false, fmt.Errorf("the code interpreter's result line: %w", err)
		}
		res.Main, res.Text, res.HTML, res.Markdown, res.SVG = r.IsMain, r.Text, r.HTML, r.Markdown, r.SVG
		res.PNG, res.JPEG, res.PDF, res.LaTeX, res.JavaScript, res.JSON = r.PNG, r.JPEG, r.PDF, r.LaTeX, r.JavaScript, r.JSON
		return sandboxv1.CodeEvent{Type: sandboxv1.CodeEventResult, Result: &res}, true, nil
	}
	return ev, false, nil
}

// interpreter sends one request to the code interpreter server of sb
// through the node's port path, as ingress does.
func (a *API) interpreter(ctx context.Context, sb *sandbox.Sandbox, method, path string, body []byte) (*http.Response, error) {
	if sb.State != sandbox.StateRunning {
		return nil, fmt.Errorf("%w: sandbox %s is %s, not running", errdefs.ErrConflict, sb.ID, sb.State)
	}
	rt, err := a.host.PortTransport(sb, sandboxv1.CodeInterpreterPort)
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://port"+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, errdefs.ErrRefreshRoute) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: sandbox %s: code interpreter: %v", errdefs.ErrUnavailable, sb.ID, err)
	}
	switch {
	case resp.StatusCode < 300:
		return resp, nil
	case resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusBadGateway:
		// Nothing listens on the port (the node's answer).
		resp.Body.Close()
		return nil, errNoInterpreter(sb)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(b, &e)
	msg := e.Error
	if msg == "" {
		msg = e.Message
	}
	if msg == "" {
		msg = strings.TrimSpace(string(b))
	}
	var class error
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		class = errdefs.ErrInvalidArgument
	case http.StatusNotFound:
		class = errdefs.ErrNotFound
	case http.StatusTooManyRequests:
		class = errdefs.ErrResourceExhausted
	case http.StatusConflict:
		// The node's refusal (a route that changed): keep its class.
		if refusal, _ := apierr.DecodeBody(b); refusal != nil {
			return nil, refusal
		}
		class = errdefs.ErrConflict
	default:
		class = errdefs.ErrUnavailable
	}
	return nil, fmt.Errorf("%w: sandbox %s: code interpreter: %s", class, sb.ID, clip(msg))
}

// handleRunCode serves POST /v1/sandboxes/{id}/code: the execution's
// events as NDJSON, streamed as the interpreter sends them.
func (a *API) handleRunCode(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var req sandboxv1.CodeRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	body, timeout, err := interpreterExecute(&req)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	release, err := a.host.OpenStream(sb)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	resp, err := a.interpreter(ctx, sb, http.MethodPost, "/execute", body)
	if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
		err = fmt.Errorf("%w: sandbox %s: the code interpreter did not answer within the timeout of %s", errdefs.ErrUnavailable, sb.ID, timeout)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	send := func(ev sandboxv1.CodeEvent) bool {
		if enc.Encode(ev) != nil {
			return false
		}
		return rc.Flush() == nil
	}
	end := func(e *sandboxv1.CodeError) {
		if e != nil {
			send(sandboxv1.CodeEvent{Type: sandboxv1.CodeEventError, Error: e})
		}
		send(sandboxv1.CodeEvent{Type: sandboxv1.CodeEventEnd})
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := readLine(br, maxCodeLine)
		if len(bytes.TrimSpace(line)) > 0 {
			ev, ok, perr := codeEvent(line)
			if perr != nil {
				end(&sandboxv1.CodeError{Name: "InterpreterError", Value: perr.Error()})
				return
			}
			if ok {
				if !send(ev) {
					return // the client went away: closing resp interrupts the code
				}
				if ev.Type == sandboxv1.CodeEventEnd {
					return
				}
			}
		}
		if err != nil {
			switch {
			case r.Context().Err() != nil:
			case ctx.Err() != nil:
				end(&sandboxv1.CodeError{Name: "TimeoutError", Value: fmt.Sprintf(
					"the code ran past its timeout of %s and was interrupted (a Python context keeps its state; a Bash context's shell is restarted)", timeout)})
			default:
				end(&sandboxv1.CodeError{Name: "InterpreterError", Value: fmt.Sprintf("the code interpreter's stream ended before the end of the execution: %v", err)})
			}
			return
		}
	}
}

// readLine reads one line of at most limit bytes (without its newline).
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > limit {
			return nil, fmt.Errorf("a line of the code interpreter's stream is over %d bytes", limit)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), err
	}
}

// handleListCodeContexts serves GET /v1/sandboxes/{id}/code/contexts.
func (a *API) handleListCodeContexts(w http.ResponseWriter, r *http.Request) {
	var list []sandboxv1.CodeContext
	if err := a.codeCall(r, http.MethodGet, "/contexts", nil, &list); err != nil {
		a.writeError(w, r, err)
		return
	}
	if list == nil {
		list = []sandboxv1.CodeContext{}
	}
	writeJSON(w, http.StatusOK, sandboxv1.CodeContextList{Contexts: list})
}

// handleCreateCodeContext serves POST /v1/sandboxes/{id}/code/contexts.
func (a *API) handleCreateCodeContext(w http.ResponseWriter, r *http.Request) {
	var req sandboxv1.CodeContextRequest
	if err := decodeJSON(w, r, &req); err != nil {
		a.writeError(w, r, err)
		return
	}
	fields := map[string]string{}
	if req.Language != "" {
		fields["language"] = req.Language
	}
	if req.Cwd != "" {
		fields["cwd"] = req.Cwd
	}
	body, err := json.Marshal(fields)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var c sandboxv1.CodeContext
	if err := a.codeCall(r, http.MethodPost, "/contexts", body, &c); err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, c)
}

// handleRestartCodeContext serves POST /v1/sandboxes/{id}/code/contexts/{context}/restart.
func (a *API) handleRestartCodeContext(w http.ResponseWriter, r *http.Request) {
	if err := a.codeCall(r, http.MethodPost, "/contexts/"+contextSegment(r)+"/restart", []byte("{}"), nil); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleDeleteCodeContext serves DELETE /v1/sandboxes/{id}/code/contexts/{context}.
func (a *API) handleDeleteCodeContext(w http.ResponseWriter, r *http.Request) {
	if err := a.codeCall(r, http.MethodDelete, "/contexts/"+contextSegment(r), nil, nil); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// contextSegment is the request's {context}, escaped for a path.
func contextSegment(r *http.Request) string {
	return url.PathEscape(r.PathValue("context"))
}

// codeCall sends one request to the sandbox's interpreter and decodes its
// JSON answer into out (when not nil).
func (a *API) codeCall(r *http.Request, method, path string, body []byte, out any) error {
	sb, err := a.sandboxFor(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute) // a kernel start is seconds
	defer cancel()
	resp, err := a.interpreter(ctx, sb, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("%w: sandbox %s: the code interpreter's answer to %s %s: %v", errdefs.ErrUnavailable, sb.ID, method, path, err)
	}
	return nil
}
