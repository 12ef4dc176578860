package vm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// maxQMPLine bounds one QMP message; QEMU writes one JSON object a line.
const maxQMPLine = 1 << 20

// qmpMessage is one message from QEMU: the greeting, an event, or the answer
// to a command (return or error).
type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP"`
	Event  string          `json:"event"`
	Data   json.RawMessage `json:"data"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
}

// maxEventsBeforeGreeting bounds the events readGreeting skips.
const maxEventsBeforeGreeting = 64

// readGreeting reads QEMU's QMP greeting. Events can come first: QEMU keeps
// one output queue per monitor, and events raised while the previous client
// was leaving (a netdev disconnecting, say) reach the next client before its
// greeting. They are skipped; anything else is not a QMP server.
func (c *qmpConn) readGreeting() error {
	for i := 0; ; i++ {
		m, err := c.readMessage()
		if err != nil {
			return fmt.Errorf("qmp greeting: %w", err)
		}
		if m.QMP != nil {
			return nil
		}
		if m.Event == "" || i >= maxEventsBeforeGreeting {
			return errors.New("qmp greeting: not a QMP server")
		}
	}
}

// parseQMPLine decodes one line from the QMP socket.
func parseQMPLine(line []byte) (*qmpMessage, error) {
	var m qmpMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("qmp: malformed message: %w", err)
	}
	return &m, nil
}

// qmpConn is one QMP session: the greeting read and capabilities negotiated.
type qmpConn struct {
	rw io.ReadWriteCloser
	r  *bufio.Reader
	// onEvent, when set, sees every event read while waiting for answers.
	onEvent func(*qmpMessage)
}

func (c *qmpConn) readMessage() (*qmpMessage, error) {
	var line []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxQMPLine {
			return nil, fmt.Errorf("qmp: message longer than %d bytes", maxQMPLine)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
	return parseQMPLine(line)
}

// execute sends a command without arguments and waits for its answer,
// skipping events.
func (c *qmpConn) execute(cmd string) (json.RawMessage, error) {
	return c.call(cmd, nil, nil)
}

// call sends a command with arguments (nil for none), optionally passing
// file descriptors along (SCM_RIGHTS; rw must then be a *net.UnixConn), and
// waits for its answer, handing events to onEvent.
func (c *qmpConn) call(cmd string, args any, fds []int) (json.RawMessage, error) {
	msg := map[string]any{"execute": cmd}
	if args != nil {
		msg["arguments"] = args
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	b = append(b, '\n')
	if len(fds) > 0 {
		uc, ok := c.rw.(*net.UnixConn)
		if !ok {
			return nil, fmt.Errorf("qmp %s: passing descriptors needs a unix socket", cmd)
		}
		_, _, err = uc.WriteMsgUnix(b, unix.UnixRights(fds...), nil)
	} else {
		_, err = c.rw.Write(b)
	}
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	for {
		m, err := c.readMessage()
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		if m.Error != nil {
			return nil, fmt.Errorf("qmp %s: %s: %s", cmd, m.Error.Class, m.Error.Desc)
		}
		if m.Return != nil {
			return m.Return, nil
		}
		if m.Event != "" && c.onEvent != nil {
			c.onEvent(m)
		}
	}
}

func newReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 64<<10) }

// qmpExecute runs one command on the execution's QMP socket in a session of
// its own. For quit, the socket closing before the answer is success.
func (d *Driver) qmpExecute(ctx context.Context, st *state, cmd string) error {
	uc, err := d.dialState(ctx, st.ExecID, qmpSock)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", cmd, err)
	}
	defer uc.Close()
	deadline := time.Now().Add(10 * time.Second)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	uc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { uc.SetDeadline(time.Now()) })
	defer stop()
	c := &qmpConn{rw: uc, r: newReader(uc)}
	if err := c.readGreeting(); err != nil {
		return err
	}
	if _, err := c.execute("qmp_capabilities"); err != nil {
		return err
	}
	_, err = c.execute(cmd)
	if cmd == "quit" && errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
