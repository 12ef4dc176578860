package space

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/coder/websocket"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// Limits of the streaming protocols.
const (
	// maxStreamMessage bounds one WebSocket message from the server.
	maxStreamMessage = 4 << 20
	// stdinChunk is the most stdin bytes sent in one message: 16 KiB is about
	// 22 KB of base64, which stays under a WebSocket peer's default 32 KiB limit.
	stdinChunk = 16 << 10
)

// StreamOptions says where a streaming exec's output goes.
//
// A nil Stdout (or Stderr) makes the output readable from ExecStream.Stdout (or
// Stderr) instead; that reader must then be read until EOF, as with
// os/exec.Cmd.StdoutPipe, or the stream stalls. Use io.Discard to drop output.
type StreamOptions struct {
	Stdout io.Writer
	Stderr io.Writer
}

// StreamError is an error the server reported on a stream ({"type":"error"}).
type StreamError struct {
	Message string
}

// Error returns the server's message.
func (e *StreamError) Error() string { return e.Message }

// ExecStream is a command running in a sandbox over a WebSocket: its stdin is
// written with Stdin, its output arrives as it is produced, it takes signals and
// terminal resizes, and Wait returns its exit code.
type ExecStream struct {
	conn *websocket.Conn
	// ctx is the stream's lifetime, not a request's: it ends on Close or when the
	// stream finishes, and bounds every write on the connection.
	ctx    context.Context
	cancel context.CancelFunc

	stdout, stderr   io.Writer
	stdoutR, stderrR *io.PipeReader
	stdinOnce        sync.Once
	// stopUnblock cancels the hook that closes the output pipes' readers when
	// ctx ends, which is what frees a receive loop stuck on an unread pipe.
	stopUnblock func() bool

	done     chan struct{} // closed when the receive loop has ended
	pid      atomic.Uint32 // set by receive when the server reports it
	exitCode int           // written by receive before done closes
	err      error         // written by receive before done closes
}

// StartExec starts a command in a sandbox over a WebSocket and returns the
// running stream. The stream outlives ctx only as far as the handshake: cancel
// ctx and the stream ends too.
func (c *Client) StartExec(ctx context.Context, id string, start sandboxv1.ExecStart, opts StreamOptions) (*ExecStream, error) {
	if len(start.Cmd) == 0 {
		return nil, fmt.Errorf("exec in sandbox %s: command is empty", id)
	}
	conn, err := c.dialStream(ctx, id, "/exec", nil)
	if err != nil {
		return nil, fmt.Errorf("exec %q in sandbox %s: %w", start.Cmd[0], id, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	s := &ExecStream{conn: conn, ctx: sctx, cancel: cancel, done: make(chan struct{})}
	s.stdout, s.stdoutR = outputSink(opts.Stdout)
	s.stderr, s.stderrR = outputSink(opts.Stderr)
	if err := s.send(sctx, start); err != nil {
		cancel()
		conn.CloseNow()
		return nil, fmt.Errorf("exec %q in sandbox %s: send start: %w", start.Cmd[0], id, err)
	}
	s.stopUnblock = context.AfterFunc(sctx, func() {
		for _, r := range []*io.PipeReader{s.stdoutR, s.stderrR} {
			if r != nil {
				r.CloseWithError(fmt.Errorf("exec stream closed: %w", context.Cause(sctx)))
			}
		}
	})
	go s.receive()
	return s, nil
}

// outputSink returns w, or when w is nil a pipe whose reader the caller reads.
func outputSink(w io.Writer) (io.Writer, *io.PipeReader) {
	if w != nil {
		return w, nil
	}
	r, pw := io.Pipe()
	return pw, r
}

// dialStream opens a WebSocket on /v1/sandboxes/{id}{suffix}. A refused handshake
// becomes an *APIError.
func (c *Client) dialStream(ctx context.Context, id, suffix string, query url.Values) (*websocket.Conn, error) {
	p, err := sandboxPath(id, suffix)
	if err != nil {
		return nil, err
	}
	u := c.base + p
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	h := http.Header{}
	c.authorize(h)
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, readAPIError(resp)
		}
		return nil, fmt.Errorf("open WebSocket %s: %w", p, err)
	}
	conn.SetReadLimit(maxStreamMessage)
	return conn, nil
}

// send writes one JSON text message.
func (s *ExecStream) send(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.conn.Write(ctx, websocket.MessageText, b)
}

// receive reads the server's messages until the command exits or the stream
// breaks, then records the outcome and closes done.
func (s *ExecStream) receive() {
	var outErr error
	exit, err := s.readUntilExit(&outErr)
	s.stopUnblock()
	s.exitCode = exit
	s.err = errors.Join(err, outErr)
	closeErr := s.err
	if closeErr == nil {
		closeErr = io.EOF
	}
	for _, w := range []io.Writer{s.stdout, s.stderr} {
		if pw, ok := w.(*io.PipeWriter); ok {
			if closeErr == io.EOF {
				pw.Close()
			} else {
				pw.CloseWithError(closeErr)
			}
		}
	}
	if err == nil {
		s.conn.Close(websocket.StatusNormalClosure, "")
	} else {
		s.conn.CloseNow()
	}
	s.cancel()
	close(s.done)
}

// readUntilExit handles messages until the exit message and returns the exit code.
// A failed write of output is kept in *outErr and further output of that stream
// dropped, so the exit code still arrives.
func (s *ExecStream) readUntilExit(outErr *error) (int, error) {
	for {
		typ, data, err := s.conn.Read(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil {
				return -1, fmt.Errorf("exec stream: %w", context.Cause(s.ctx))
			}
			return -1, fmt.Errorf("exec stream ended before the command exited: %w", err)
		}
		if typ != websocket.MessageText {
			continue
		}
		var m sandboxv1.ExecMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return -1, fmt.Errorf("exec stream: malformed message from server: %w", err)
		}
		switch m.Type {
		case "started":
			s.pid.Store(m.Pid)
		case "stdout":
			s.deliver(&s.stdout, m.Data, "stdout", outErr)
		case "stderr":
			s.deliver(&s.stderr, m.Data, "stderr", outErr)
		case "exit":
			if m.ExitCode == nil {
				return -1, errors.New("exec stream: exit message without exit_code")
			}
			return *m.ExitCode, nil
		case "error":
			return -1, &StreamError{Message: cleanText(m.Message, 1024)}
		}
		// Unknown types are skipped: newer servers may send more.
	}
}

// deliver writes output to *w; on failure it records the error and drops the
// rest of that stream.
func (s *ExecStream) deliver(w *io.Writer, data []byte, name string, outErr *error) {
	if len(data) == 0 {
		return
	}
	if _, err := (*w).Write(data); err != nil {
		*outErr = errors.Join(*outErr, fmt.Errorf("write %s: %w", name, err))
		*w = io.Discard
	}
}

// Stdout returns the reader of the command's stdout when StreamOptions.Stdout was
// nil, else nil.
func (s *ExecStream) Stdout() io.Reader {
	if s.stdoutR == nil {
		return nil
	}
	return s.stdoutR
}

// Stderr returns the reader of the command's stderr when StreamOptions.Stderr was
// nil, else nil.
func (s *ExecStream) Stderr() io.Reader {
	if s.stderrR == nil {
		return nil
	}
	return s.stderrR
}

// Stdin returns a writer to the command's stdin; closing it closes the command's
// stdin (the command sees EOF). Writes are sent in chunks of at most 16 KiB.
func (s *ExecStream) Stdin() io.WriteCloser { return stdinWriter{s} }

type stdinWriter struct{ s *ExecStream }

// Write sends p as stdin.
func (w stdinWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), stdinChunk)]
		if err := w.s.send(w.s.ctx, sandboxv1.ExecMessage{Type: "stdin", Data: chunk}); err != nil {
			return n, fmt.Errorf("exec stream: send stdin: %w", w.s.streamErr(err))
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// Close sends close_stdin once.
func (w stdinWriter) Close() error { return w.s.CloseStdin() }

// CloseStdin closes the command's stdin. Calls after the first do nothing.
func (s *ExecStream) CloseStdin() error {
	var err error
	s.stdinOnce.Do(func() {
		if e := s.send(s.ctx, sandboxv1.ExecMessage{Type: "close_stdin"}); e != nil {
			err = fmt.Errorf("exec stream: close stdin: %w", s.streamErr(e))
		}
	})
	return err
}

// Signal sends sig to the command.
func (s *ExecStream) Signal(ctx context.Context, sig syscall.Signal) error {
	if err := s.send(ctx, sandboxv1.ExecMessage{Type: "signal", Signal: int(sig)}); err != nil {
		return fmt.Errorf("exec stream: send signal %d: %w", int(sig), s.streamErr(err))
	}
	return nil
}

// Resize tells the command's terminal its new size (TTY streams only).
func (s *ExecStream) Resize(ctx context.Context, cols, rows uint32) error {
	if err := s.send(ctx, sandboxv1.ExecMessage{Type: "resize", Cols: cols, Rows: rows}); err != nil {
		return fmt.Errorf("exec stream: send resize %dx%d: %w", cols, rows, s.streamErr(err))
	}
	return nil
}

// streamErr prefers the stream's own outcome to a write error caused by it.
func (s *ExecStream) streamErr(err error) error {
	select {
	case <-s.done:
		if s.err != nil {
			return s.err
		}
		return errors.New("the command has exited")
	default:
		return err
	}
}

// Pid returns the command's process id in the sandbox, or 0 before the server
// reported it.
func (s *ExecStream) Pid() uint32 { return s.pid.Load() }

// Done is closed when the stream has ended.
func (s *ExecStream) Done() <-chan struct{} { return s.done }

// Wait waits for the command to exit and returns its exit code. The error is
// non-nil when the stream broke, the server reported an error, or output could
// not be written; the exit code is -1 when it is unknown.
func (s *ExecStream) Wait() (int, error) {
	<-s.done
	return s.exitCode, s.err
}

// Close ends the stream without waiting for the command; the server is expected
// to kill it. Close after Wait does nothing.
func (s *ExecStream) Close() error {
	s.cancel()
	<-s.done
	return nil
}
