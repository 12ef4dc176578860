package guestd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
)

const (
	// outputChunk is the largest data event the daemon sends.
	outputChunk = 32 << 10
	// subscriberQueue bounds the events queued per subscriber; a full queue
	// blocks the process's output (like a full pipe), so memory stays bounded.
	subscriberQueue = 16
	// maxSubscribers bounds the streams attached to one process.
	maxSubscribers = 32
	// drainAfterExit is how long output is still read after the process exits,
	// for descendants that keep its stdout open.
	drainAfterExit = 250 * time.Millisecond
)

// processTable holds the running processes started through the daemon.
type processTable struct {
	mu    sync.Mutex // guards byPid; held across fork so limits and tags hold
	byPid map[int]*process
	max   int
}

func newProcessTable(max int) *processTable {
	return &processTable{byPid: map[int]*process{}, max: max}
}

// insert runs fork with the table locked after checking the limit and that
// the tag is unused, and adds the process fork returns.
func (t *processTable) insert(tag *string, fork func() (*process, error)) (*process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.byPid) >= t.max {
		return nil, fmt.Errorf("%d processes already run: %w", t.max, errTooMany)
	}
	if tag != nil {
		for _, p := range t.byPid {
			if p.tag != nil && *p.tag == *tag {
				return nil, fmt.Errorf("tag %q is used by process %d: %w", *tag, p.pid, os.ErrExist)
			}
		}
	}
	p, err := fork()
	if err != nil {
		return nil, err
	}
	t.byPid[p.pid] = p
	return p, nil
}

func (t *processTable) remove(p *process) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPid[p.pid] == p {
		delete(t.byPid, p.pid)
	}
}

// find selects a process by pid or tag.
func (t *processTable) find(sel *processv1.ProcessSelector) (*process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *processv1.ProcessSelector_Pid:
		if p, ok := t.byPid[int(s.Pid)]; ok {
			return p, nil
		}
		return nil, fmt.Errorf("process with pid %d: %w", s.Pid, os.ErrNotExist)
	case *processv1.ProcessSelector_Tag:
		for _, p := range t.byPid {
			if p.tag != nil && *p.tag == s.Tag {
				return p, nil
			}
		}
		return nil, fmt.Errorf("process with tag %q: %w", s.Tag, os.ErrNotExist)
	}
	return nil, fmt.Errorf("process selector: want pid or tag: %w", errBadRequest)
}

func (t *processTable) list() []*process {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*process, 0, len(t.byPid))
	for _, p := range t.byPid {
		out = append(out, p)
	}
	return out
}

func (t *processTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byPid)
}

// killAll kills every process and waits until each has ended.
func (t *processTable) killAll() {
	for _, p := range t.list() {
		p.signal(unix.SIGKILL)
		<-p.ended
	}
}

// process is one child of the daemon and the streams attached to it.
type process struct {
	pid    int
	tag    *string
	config *processv1.ProcessConfig
	pty    *os.File // master side; nil without a PTY
	touch  func()

	stdinMu sync.Mutex // guards stdin and serialises writes to it
	stdin   *os.File   // write end; nil when not requested or closed

	mu     sync.Mutex // guards subs, end and reaped
	subs   map[*subscriber]struct{}
	end    *processv1.ProcessEvent
	reaped bool

	ended chan struct{} // closed once the end event went out
}

// subscriber is one stream receiving a process's events.
type subscriber struct {
	ch   chan *processv1.ProcessEvent
	gone chan struct{} // closed when the stream stops reading
	once sync.Once
}

// subscribe attaches a stream; it gets output from now on. A process that
// already ended yields a subscriber holding only the end event.
func (p *process) subscribe() (*subscriber, error) {
	s := &subscriber{ch: make(chan *processv1.ProcessEvent, subscriberQueue), gone: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.end != nil {
		s.ch <- p.end
		close(s.ch)
		return s, nil
	}
	if len(p.subs) >= maxSubscribers {
		return nil, fmt.Errorf("process %d already has %d streams: %w", p.pid, maxSubscribers, errTooMany)
	}
	p.subs[s] = struct{}{}
	return s, nil
}

// unsubscribe detaches s; output is no longer queued for it.
func (p *process) unsubscribe(s *subscriber) {
	s.once.Do(func() { close(s.gone) })
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

func (p *process) subscribers() []*subscriber {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		out = append(out, s)
	}
	return out
}

// broadcast queues ev for every subscriber, waiting while a queue is full.
func (p *process) broadcast(ev *processv1.ProcessEvent) {
	for _, s := range p.subscribers() {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

// finish records the end event, delivers it and closes every subscriber.
func (p *process) finish(ev *processv1.ProcessEvent) {
	p.mu.Lock()
	p.end = ev
	subs := p.subs
	p.subs = nil
	p.mu.Unlock()
	for s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
		close(s.ch)
	}
	close(p.ended)
}

// pump reads one output stream and broadcasts it until EOF or close.
func (p *process) pump(f *os.File, wrap func([]byte) *processv1.ProcessEvent_DataEvent, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		buf := make([]byte, outputChunk)
		n, err := f.Read(buf)
		if n > 0 {
			p.touch()
			p.broadcast(&processv1.ProcessEvent{Event: &processv1.ProcessEvent_Data{Data: wrap(buf[:n])}})
		}
		if err != nil {
			return
		}
	}
}

// signal sends sig to the process group, or to the process alone when it has
// no group of its own. It does nothing once the process was reaped, so a
// recycled pid is never signalled.
func (p *process) signal(sig unix.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return nil
	}
	if err := unix.Kill(-p.pid, sig); err == nil {
		return nil
	}
	if err := unix.Kill(p.pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %v to process %d: %w", sig, p.pid, err)
	}
	return nil
}

// writeInput writes to f, giving up when ctx is done.
func writeInput(ctx context.Context, f *os.File, data []byte) error {
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer func() {
		if stop() {
			_ = f.SetWriteDeadline(time.Time{})
		}
	}()
	if _, err := f.Write(data); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("write input: %w", ctx.Err())
		}
		return fmt.Errorf("write input: %w", err)
	}
	return nil
}

// endEvent describes a wait status the way os.ProcessState does, as envd sends it.
func endEvent(ws unix.WaitStatus) *processv1.ProcessEvent {
	end := &processv1.ProcessEvent_EndEvent{ExitCode: -1, Status: exitStatusString(ws)}
	if ws.Exited() {
		end.Exited = true
		end.ExitCode = int32(ws.ExitStatus())
	}
	return &processv1.ProcessEvent{Event: &processv1.ProcessEvent_End{End: end}}
}

// exitStatusString formats ws like os.ProcessState.String.
func exitStatusString(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		s := "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	case ws.Stopped():
		return "stop signal: " + ws.StopSignal().String()
	}
	return "exit status unknown"
}
