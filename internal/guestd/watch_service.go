package guestd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
)

// maxPolledEvents bounds the events a polling watcher keeps between polls;
// later events are dropped until the next GetWatcherEvents.
const maxPolledEvents = 10000

// watcherTable holds the polling watchers and counts the streaming ones, so
// that the host cannot open inotify instances without bound.
type watcherTable struct {
	mu     sync.Mutex // guards byID and active
	byID   map[string]*polledWatch
	active int
	max    int

	// watches is the inotify watch budget all the watchers draw from.
	watches *watchBudget
}

func newWatcherTable(max, maxWatches int) *watcherTable {
	return &watcherTable{byID: map[string]*polledWatch{}, max: max, watches: &watchBudget{max: maxWatches}}
}

func (t *watcherTable) acquire() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.active >= t.max {
		return fmt.Errorf("%d directory watchers already exist: %w", t.max, errTooMany)
	}
	t.active++
	return nil
}

func (t *watcherTable) release() {
	t.mu.Lock()
	t.active--
	t.mu.Unlock()
}

func (t *watcherTable) closeAll() {
	t.mu.Lock()
	ws := t.byID
	t.byID = map[string]*polledWatch{}
	t.mu.Unlock()
	for _, w := range ws {
		w.stop()
		t.release()
	}
}

// polledWatch collects a watcher's events until they are polled.
type polledWatch struct {
	w    *dirWatch
	done chan struct{}

	mu      sync.Mutex // guards pending and dropped
	pending []*filesystemv1.FilesystemEvent
	dropped int
}

func (p *polledWatch) collect() {
	defer close(p.done)
	for ev := range p.w.events {
		p.mu.Lock()
		if len(p.pending) < maxPolledEvents {
			p.pending = append(p.pending, ev)
		} else {
			p.dropped++
		}
		p.mu.Unlock()
	}
}

func (p *polledWatch) stop() {
	p.w.close()
	<-p.done
}

func (s *filesystemService) startWatch(h http.Header, path string, recursive, includeEntry, allowNetwork bool) (*dirWatch, error) {
	u, root, err := s.callerPath(h, path)
	if err != nil {
		return nil, err
	}
	if err := s.d.watchers.acquire(); err != nil {
		return nil, err
	}
	w, err := newDirWatch(root, recursive, includeEntry, allowNetwork, s.d.watchers.watches, u.db, s.d.log)
	if err != nil {
		s.d.watchers.release()
		return nil, err
	}
	return w, nil
}

func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystemv1.WatchDirRequest], stream *connect.ServerStream[filesystemv1.WatchDirResponse]) error {
	m := req.Msg
	w, err := s.startWatch(req.Header(), m.GetPath(), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts())
	if err != nil {
		return rpcError(err)
	}
	defer s.d.watchers.release()
	defer w.close()
	start := &filesystemv1.WatchDirResponse{Event: &filesystemv1.WatchDirResponse_Start{Start: &filesystemv1.WatchDirResponse_StartEvent{}}}
	if err := stream.Send(start); err != nil {
		return err
	}
	interval := keepaliveInterval(req.Header())
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-w.events:
			if !ok {
				return connect.NewError(connect.CodeUnavailable, fmt.Errorf("watch %s: watcher stopped", w.root))
			}
			if err := stream.Send(&filesystemv1.WatchDirResponse{Event: &filesystemv1.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			tick.Reset(interval)
		case <-tick.C:
			ka := &filesystemv1.WatchDirResponse{Event: &filesystemv1.WatchDirResponse_Keepalive{Keepalive: &filesystemv1.WatchDirResponse_KeepAlive{}}}
			if err := stream.Send(ka); err != nil {
				return err
			}
		case <-ctx.Done():
			return contextError(ctx)
		}
	}
}

func (s *filesystemService) CreateWatcher(_ context.Context, req *connect.Request[filesystemv1.CreateWatcherRequest]) (*connect.Response[filesystemv1.CreateWatcherResponse], error) {
	m := req.Msg
	w, err := s.startWatch(req.Header(), m.GetPath(), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts())
	if err != nil {
		return nil, rpcError(err)
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	pw := &polledWatch{w: w, done: make(chan struct{})}
	go pw.collect()
	t := s.d.watchers
	t.mu.Lock()
	t.byID[id] = pw
	t.mu.Unlock()
	return connect.NewResponse(&filesystemv1.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *filesystemService) watcher(id string) (*polledWatch, error) {
	t := s.d.watchers
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.byID[id]
	if !ok {
		return nil, fmt.Errorf("watcher %q: %w", id, os.ErrNotExist)
	}
	return w, nil
}

func (s *filesystemService) GetWatcherEvents(_ context.Context, req *connect.Request[filesystemv1.GetWatcherEventsRequest]) (*connect.Response[filesystemv1.GetWatcherEventsResponse], error) {
	w, err := s.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, rpcError(err)
	}
	w.mu.Lock()
	events, dropped := w.pending, w.dropped
	w.pending, w.dropped = nil, 0
	w.mu.Unlock()
	if dropped > 0 {
		s.d.log.Warn("watcher dropped events between polls", "watcher", req.Msg.GetWatcherId(), "dropped", dropped)
	}
	return connect.NewResponse(&filesystemv1.GetWatcherEventsResponse{Events: events}), nil
}

func (s *filesystemService) RemoveWatcher(_ context.Context, req *connect.Request[filesystemv1.RemoveWatcherRequest]) (*connect.Response[filesystemv1.RemoveWatcherResponse], error) {
	t := s.d.watchers
	t.mu.Lock()
	w, ok := t.byID[req.Msg.GetWatcherId()]
	delete(t.byID, req.Msg.GetWatcherId())
	t.mu.Unlock()
	if !ok {
		return nil, rpcError(fmt.Errorf("watcher %q: %w", req.Msg.GetWatcherId(), os.ErrNotExist))
	}
	w.stop()
	t.release()
	return connect.NewResponse(&filesystemv1.RemoveWatcherResponse{}), nil
}
