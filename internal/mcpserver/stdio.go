package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxStdioLine bounds one message of the stdio transport, as the SDK's own
// stdio transport does (mcp.DefaultMaxLineLength).
const maxStdioLine = mcp.DefaultMaxLineLength

// stdioTransport is MCP's stdio transport (newline-delimited JSON-RPC) as
// the SDK's mcp.IOTransport speaks it, with one difference: a line that is
// no JSON-RPC message is answered with a JSON-RPC error and the session goes
// on. Bytes that are not JSON, or a line longer than maxStdioLine, are a
// parse error (-32700); JSON that is no request, notification or response is
// an invalid request (-32600), with the line's id when it has one. The
// SDK's transport ends the session on the first such line, and `space mcp`
// with it.
type stdioTransport struct {
	in  io.Reader
	out io.Writer
}

// Connect starts the filter between in and the SDK's transport.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	pr, pw := io.Pipe()
	out := &lockedWriter{w: t.out}
	go filterLines(t.in, pw, out)
	return (&mcp.IOTransport{Reader: pr, Writer: out, MaxLineLength: -1}).Connect(ctx)
}

// filterLines copies the JSON-RPC messages of in, a line each, to pw, and
// answers every other line on out. It ends at in's end (pw then reads EOF)
// or when the transport closes pr.
func filterLines(in io.Reader, pw *io.PipeWriter, out io.Writer) {
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		line, tooLong, err := readLine(br, maxStdioLine)
		if tooLong || len(bytes.TrimSpace(line)) > 0 {
			if answer := refusal(line, tooLong); answer != nil {
				if _, werr := out.Write(answer); werr != nil {
					pw.CloseWithError(werr)
					return
				}
			} else if _, werr := pw.Write(append(line, '\n')); werr != nil {
				return // the transport is closed
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			pw.CloseWithError(err)
			return
		}
	}
}

// readLine reads one line of br without its newline. A line longer than
// max is read to its end and dropped: tooLong, and no bytes.
func readLine(br *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), tooLong, err
	}
}

// refusal is the JSON-RPC error answering line, or nil when line is a
// message (or a batch of them, which the SDK reads itself) to pass on.
func refusal(line []byte, tooLong bool) []byte {
	switch {
	case tooLong:
		return rpcError(nil, jsonrpc.CodeParseError, fmt.Sprintf("parse error: a message longer than %d bytes", maxStdioLine))
	case !json.Valid(line):
		return rpcError(nil, jsonrpc.CodeParseError, "parse error: not JSON; send one JSON-RPC 2.0 message a line")
	}
	if trimmed := bytes.TrimSpace(line); trimmed[0] == '[' {
		return nil
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		var withID struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(line, &withID)
		return rpcError(withID.ID, jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error())
	}
	return nil
}

// rpcError is a JSON-RPC error response line; id nil is null.
func rpcError(id json.RawMessage, code int, message string) []byte {
	if len(id) == 0 || !validID(id) {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}{"2.0", id, jsonrpc.Error{Code: int64(code), Message: message}})
	return append(b, '\n')
}

// validID reports whether raw is an id a response may carry: a string or
// a number.
func validID(raw json.RawMessage) bool {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return false
	}
	switch v.(type) {
	case string, float64:
		return true
	}
	return false
}

// lockedWriter serializes the SDK's writes and the filter's answers, so
// that lines never interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Close leaves the underlying writer open, as the SDK's stdio transport
// leaves standard output.
func (l *lockedWriter) Close() error { return nil }
