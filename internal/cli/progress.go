package cli

import (
	"context"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/progress"
)

// eventPollEvery is how often a waiting hibernate or restore reads the
// sandbox's events for progress.
const eventPollEvery = 500 * time.Millisecond

// eventProgress shows on stderr the "progress" events of a sandbox (a
// snapshot's upload or download) that come after a starting point: a bar
// on a terminal, plain lines elsewhere.
type eventProgress struct {
	e     *env
	id    string
	after int64 // the last event seq already seen
	bar   *progress.Renderer
}

// newEventProgress starts after the sandbox's latest event. A sandbox whose
// events cannot be read shows none (the wait goes on without).
func newEventProgress(ctx context.Context, e *env, id string) *eventProgress {
	p := &eventProgress{e: e, id: id, bar: progress.RendererFor(e.stderr)}
	if evs, err := e.c.ListEvents(ctx, id); err == nil && len(evs) > 0 {
		p.after = evs[len(evs)-1].Seq
	}
	return p
}

// poll shows the progress events that came since the last poll.
func (p *eventProgress) poll(ctx context.Context) {
	evs, err := p.e.c.ListEvents(ctx, p.id)
	if err != nil {
		return
	}
	for _, ev := range evs {
		if ev.Seq <= p.after {
			continue
		}
		p.after = ev.Seq
		if ev.Type == "progress" && ev.Progress != nil {
			p.bar.Show(progress.Report(*ev.Progress))
			if ev.Progress.Final {
				p.bar.Done()
			}
		}
	}
}

// waitShowingProgress waits for the sandbox to reach want, showing the
// progress events on the way.
func (p *eventProgress) waitShowingProgress(ctx context.Context, want sandboxv1.State) (*sandboxv1.Sandbox, error) {
	type result struct {
		sb  *sandboxv1.Sandbox
		err error
	}
	done := make(chan result, 1)
	go func() {
		sb, err := p.e.c.WaitForState(ctx, p.id, want)
		done <- result{sb, err}
	}()
	tick := time.NewTicker(eventPollEvery)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			p.poll(context.WithoutCancel(ctx)) // the last readings
			p.bar.Done()
			return r.sb, r.err
		case <-tick.C:
			p.poll(ctx)
		}
	}
}
