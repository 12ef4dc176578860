package nodemanager

import (
	"context"
	"net"
	"time"

	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/progress"
)

// Progress of template builds. A build records each line of its output in a
// tracker kept by template name while it runs; a caller that asked for
// progress (TemplateArgs.Progress) gets the latest reading about once a
// second, as Responses that carry only Progress, before the answer. Every
// caller that shares one build (singleflight) sees the same readings.

// startBuild makes the tracker of name's build.
func (s *Server) startBuild(name string) *progress.Tracker {
	tr := progress.NewTracker("build", progress.UnitSteps, 0, progress.Throttle{}, nil, func(progress.Report) {})
	s.buildsMu.Lock()
	s.building[name] = tr
	s.buildsMu.Unlock()
	return tr
}

// endBuild forgets name's build.
func (s *Server) endBuild(name string) {
	s.buildsMu.Lock()
	delete(s.building, name)
	s.buildsMu.Unlock()
}

// buildReading is the latest reading of name's build; ok is false when none
// runs.
func (s *Server) buildReading(name string) (progress.Report, bool) {
	s.buildsMu.Lock()
	tr := s.building[name]
	s.buildsMu.Unlock()
	if tr == nil {
		return progress.Report{}, false
	}
	return tr.Current(), true
}

// serveBuild answers an OpEnsureTemplate that asked for progress: readings
// while the build runs, then the answer. A caller that goes away does not
// stop the build (ensureTemplate detaches it); the connection is served,
// without readings, until the build ends, as one without progress is.
func (s *Server) serveBuild(ctx context.Context, c *net.UnixConn, uid uint32, req *privop.Request) {
	done := make(chan privop.Response, 1)
	go func() {
		resp, _ := s.handle(ctx, uid, req) // OpEnsureTemplate carries no files
		done <- resp
	}()
	tick := time.NewTicker(s.progressEvery)
	defer tick.Stop()
	var sent progress.Report
	gone := false
	for {
		select {
		case resp := <-done:
			if gone {
				return
			}
			if err := privop.WriteMessage(c, resp); err != nil {
				s.log.Warn("node-manager: write response", "op", req.Op, "err", err)
			}
			return
		case <-tick.C:
			r, ok := s.buildReading(req.Template.Name)
			if gone || !ok || (r.Done == sent.Done && r.Message == sent.Message) {
				continue
			}
			sent = r
			if err := privop.WriteMessage(c, privop.Response{Progress: &r}); err != nil {
				s.log.Info("node-manager: build progress: the caller went away", "template", req.Template.Name, "err", err)
				gone = true
			}
		}
	}
}
