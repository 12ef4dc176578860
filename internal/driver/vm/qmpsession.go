package vm

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"
)

// qmpSession is a QMP connection kept open across the steps of a checkpoint
// or a restore. It keeps the events it reads, so a step can wait for one that
// arrived while an earlier command was answered.
type qmpSession struct {
	ctx    context.Context
	uc     *net.UnixConn
	c      *qmpConn
	events []*qmpMessage
	stop   func() bool
}

// maxKeptEvents bounds the events a session keeps (the oldest go first).
const maxKeptEvents = 256

// qmpStepTimeout bounds one command of a session.
const qmpStepTimeout = 10 * time.Second

// openQMP connects to the execution's QMP socket (waiting for QEMU to create
// it) and negotiates capabilities. Cancelling ctx ends every later step.
func (d *Driver) openQMP(ctx context.Context, st *state) (*qmpSession, error) {
	uc, err := d.dialRetry(ctx, st, qmpSock)
	if err != nil {
		return nil, err
	}
	s := &qmpSession{ctx: ctx, uc: uc}
	s.c = &qmpConn{rw: uc, r: newReader(uc), onEvent: s.keep}
	s.stop = context.AfterFunc(ctx, func() { uc.SetDeadline(time.Now()) })
	uc.SetDeadline(time.Now().Add(qmpStepTimeout))
	if err := s.c.readGreeting(); err != nil {
		s.Close()
		return nil, err
	}
	if _, err := s.c.execute("qmp_capabilities"); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close ends the session.
func (s *qmpSession) Close() error {
	s.stop()
	return s.uc.Close()
}

func (s *qmpSession) keep(m *qmpMessage) {
	if len(s.events) >= maxKeptEvents {
		s.events = s.events[1:]
	}
	s.events = append(s.events, m)
}

// run executes cmd with args (nil for none) and passes fds along.
func (s *qmpSession) run(cmd string, args any, fds ...int) (json.RawMessage, error) {
	if err := s.ctx.Err(); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	s.uc.SetDeadline(time.Now().Add(qmpStepTimeout))
	return s.c.call(cmd, args, fds)
}

// waitEvents reads events until done, given every event kept so far in
// order, returns true, or timeout passes.
func (s *qmpSession) waitEvents(timeout time.Duration, done func([]*qmpMessage) bool) error {
	s.uc.SetDeadline(time.Now().Add(timeout))
	for !done(s.events) {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		m, err := s.c.readMessage()
		if err != nil {
			return err
		}
		if m.Event != "" {
			s.keep(m)
		}
	}
	return nil
}

// status returns the VM's run state (query-status): "running", "paused",
// "inmigrate", "postmigrate", ...
func (s *qmpSession) status() (string, error) {
	ret, err := s.run("query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(ret, &st); err != nil {
		return "", fmt.Errorf("qmp query-status: %w", err)
	}
	return st.Status, nil
}

// migration is the part of query-migrate's answer the driver reads.
type migration struct {
	Status    string `json:"status"`
	ErrorDesc string `json:"error-desc"`
	RAM       *struct {
		Transferred int64 `json:"transferred"`
	} `json:"ram"`
}

// waitMigration polls query-migrate until the migration has completed (nil)
// or failed (the error QEMU gives), for at most timeout.
func (s *qmpSession) waitMigration(timeout time.Duration) (*migration, error) {
	deadline := time.Now().Add(timeout)
	for {
		ret, err := s.run("query-migrate", nil)
		if err != nil {
			return nil, err
		}
		var m migration
		if err := json.Unmarshal(ret, &m); err != nil {
			return nil, fmt.Errorf("qmp query-migrate: %w", err)
		}
		switch m.Status {
		case "completed":
			return &m, nil
		case "failed", "cancelled":
			return nil, fmt.Errorf("migration %s: %s", m.Status, m.ErrorDesc)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("migration still %q after %s", m.Status, timeout)
		}
		select {
		case <-s.ctx.Done():
			return nil, s.ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// chardevConnected reports whether a client is connected to the socket
// chardev with the given id (query-chardev names a disconnected server
// socket "disconnected:...").
func (s *qmpSession) chardevConnected(id string) (bool, error) {
	ret, err := s.run("query-chardev", nil)
	if err != nil {
		return false, err
	}
	var devs []struct {
		Label    string `json:"label"`
		Filename string `json:"filename"`
	}
	if err := json.Unmarshal(ret, &devs); err != nil {
		return false, fmt.Errorf("qmp query-chardev: %w", err)
	}
	for _, d := range devs {
		if d.Label == id {
			return !strings.HasPrefix(d.Filename, "disconnected:"), nil
		}
	}
	return false, fmt.Errorf("qmp query-chardev: no chardev %q", id)
}

// portEvent is the data of a VSERPORT_CHANGE event: the guest opened or
// closed a virtio-serial port.
type portEvent struct {
	ID   string `json:"id"`
	Open bool   `json:"open"`
}

// portEvents returns the VSERPORT_CHANGE events of the port with the given
// device id, in order, from events.
func portEvents(events []*qmpMessage, id string) []bool {
	var out []bool
	for _, m := range events {
		if m.Event != "VSERPORT_CHANGE" {
			continue
		}
		var e portEvent
		if json.Unmarshal(m.Data, &e) == nil && e.ID == id {
			out = append(out, e.Open)
		}
	}
	return out
}

// reopened reports whether the guest has the port open again after ending
// a session: more than skip events arrived and the last says open. QEMU
// rate-limits VSERPORT_CHANGE to one a second per port, sending only the
// latest state at the end of the second, so a close followed by an open may
// arrive as a single "open"; skip discounts events known to come first (the
// one a restored QEMU replays for the saved state).
func reopened(opens []bool, skip int) bool {
	return len(opens) > skip && opens[len(opens)-1]
}
