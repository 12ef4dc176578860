package sandboxv1

import "encoding/json"

// CodeInterpreterPort is the port of the code interpreter server in the
// code-interpreter template's sandboxes (the one E2B's SDKs use).
const CodeInterpreterPort = 49999

// CodeRequest is the body of POST /v1/sandboxes/{id}/code: code to run in
// the sandbox's code interpreter, in the default context of Language
// (python when neither is given) or in context Context.
type CodeRequest struct {
	Code     string            `json:"code"`
	Language string            `json:"language,omitempty"`
	Context  string            `json:"context,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	// Timeout is a Go duration (default 60s); past it the execution is
	// interrupted, the stream ends with a TimeoutError, and a Python
	// context keeps its state.
	Timeout string `json:"timeout,omitempty"`
}

// Event types of the NDJSON stream POST /v1/sandboxes/{id}/code answers.
const (
	CodeEventStdout         = "stdout"
	CodeEventStderr         = "stderr"
	CodeEventResult         = "result"
	CodeEventError          = "error"
	CodeEventExecutionCount = "execution_count"
	CodeEventEnd            = "end"
)

// CodeEvent is one line of the stream: text of stdout or stderr as the
// code writes it, a result, the error, the context's execution count, and
// last "end".
type CodeEvent struct {
	Type           string      `json:"type"`
	Text           string      `json:"text,omitempty"`
	Result         *CodeResult `json:"result,omitempty"`
	Error          *CodeError  `json:"error,omitempty"`
	ExecutionCount int         `json:"execution_count,omitempty"`
}

// CodeResult is a display or the value of the last expression (Main) in
// the formats the kernel gave: PNG, JPEG and PDF are base64.
type CodeResult struct {
	Main       bool                       `json:"main"`
	Text       string                     `json:"text,omitempty"`
	HTML       string                     `json:"html,omitempty"`
	Markdown   string                     `json:"markdown,omitempty"`
	SVG        string                     `json:"svg,omitempty"`
	PNG        string                     `json:"png,omitempty"`
	JPEG       string                     `json:"jpeg,omitempty"`
	PDF        string                     `json:"pdf,omitempty"`
	LaTeX      string                     `json:"latex,omitempty"`
	JavaScript string                     `json:"javascript,omitempty"`
	JSON       json.RawMessage            `json:"json,omitempty"`
	Extra      map[string]json.RawMessage `json:"extra,omitempty"`
}

// CodeError is the code's error: an exception's name, value and
// traceback; ExitCodeError for a Bash context's non-zero status;
// KernelDied; TimeoutError.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback,omitempty"`
}

// CodeContext is an interpreter context: its own state, language and
// working directory.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CodeContextRequest is the body of POST /v1/sandboxes/{id}/code/contexts.
type CodeContextRequest struct {
	Language string `json:"language,omitempty"`
	Cwd      string `json:"cwd,omitempty"`
}

// CodeContextList answers GET /v1/sandboxes/{id}/code/contexts.
type CodeContextList struct {
	Contexts []CodeContext `json:"contexts"`
}
