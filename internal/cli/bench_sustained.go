package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/benchstat"
	space "github.com/spacesandbox/space/sdk/go"
)

const (
	// maxSustainedDuration bounds --duration.
	maxSustainedDuration = time.Hour
	// sustainedBackoff is how long a client waits after a failed
	// operation, so that a server refusing everything is not hammered.
	sustainedBackoff = 100 * time.Millisecond
)

// sustainedConfig is what the sustained scenario runs: clients loops of
// create and delete, starting new creates for duration.
type sustainedConfig struct {
	clients  int
	duration time.Duration
}

// sustainedTally counts what the sustained scenario's clients did.
type sustainedTally struct {
	mu      sync.Mutex // guards everything below
	creates []time.Duration
	deletes []time.Duration
	errors  map[string]*errorClass // by "create CLASS" or "delete CLASS"
}

// errorClass is how many operations failed one way, and the first message.
type errorClass struct {
	n     int
	first string
}

// record counts one operation (op is "create" or "delete") that took d and
// ended with err.
func (t *sustainedTally) record(op string, d time.Duration, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil {
		if op == "create" {
			t.creates = append(t.creates, d)
		} else {
			t.deletes = append(t.deletes, d)
		}
		return
	}
	if t.errors == nil {
		t.errors = map[string]*errorClass{}
	}
	key := op + " " + errorClassOf(err)
	c := t.errors[key]
	if c == nil {
		c = &errorClass{first: err.Error()}
		t.errors[key] = c
	}
	c.n++
}

// errorClassOf names the class of a failed operation: the API's error code,
// timeout, or other.
func errorClassOf(err error) string {
	var ae *space.APIError
	switch {
	case errors.As(err, &ae) && ae.Code != "":
		return ae.Code
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "other"
	}
}

// failed returns the number of failed operations.
func (t *sustainedTally) failed() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.errors {
		n += c.n
	}
	return n
}

// errorText lists the error classes, most frequent first: "create
// unavailable ×3 (first: ...); delete timeout ×1 (first: ...)", or "none".
func (t *sustainedTally) errorText() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.errors) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(t.errors))
	for k := range t.errors {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := t.errors[keys[i]], t.errors[keys[j]]
		if a.n != b.n {
			return a.n > b.n
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		c := t.errors[k]
		parts[i] = fmt.Sprintf("%s ×%d (first: %s)", k, c.n, printable(c.first))
	}
	return strings.Join(parts, "; ")
}

// sustained runs the clients' loops of create and delete for the duration
// and reports creates/s, the latencies of create and of delete, the errors
// by class, and the machine's CPU per create+delete. A failed operation is
// counted, not fatal; a sandbox whose delete failed, or that an interrupt
// left, stays remembered for the run's cleanup (with its own context).
func (b *bench) sustained(ctx context.Context) error {
	var tally sustainedTally
	c0, err := b.cpu.read()
	if err != nil {
		return err
	}
	start := time.Now()
	end := start.Add(b.sus.duration)
	var wg sync.WaitGroup
	for range b.sus.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.sustainedClient(ctx, end, &tally)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	tally.mu.Lock()
	creates, deletes := tally.creates, tally.deletes
	tally.mu.Unlock()
	cr, err := b.cpu.spread(benchstat.Summarize(creates, wall, 0), c0)
	if err != nil {
		return err
	}
	b.report.Add("sustained_create", cr)
	b.report.Add("sustained_delete", benchstat.Summarize(deletes, wall, 0))
	cpu := "CPU not measured"
	if cr.HasCPU {
		cpu = fmt.Sprintf("machine CPU %.1f ms per create+delete (the CPU column of sustained_create)", float64(cr.CPUPerOp)/float64(time.Millisecond))
	}
	b.report.Note("sustained_create", fmt.Sprintf("%d clients for %s: %d creates, %.2f creates/s, %d deletes; %s; errors: %s",
		b.sus.clients, b.sus.duration, len(creates), cr.OpsPerSec, len(deletes), cpu, tally.errorText()))
	if n := tally.failed(); n > 0 {
		b.susErr = fmt.Errorf("bench sustained: %d operations failed: %s", n, tally.errorText())
	}
	return nil
}

// sustainedClient creates and deletes sandboxes one after the other until
// end (a create under way at end completes), or until ctx ends.
func (b *bench) sustainedClient(ctx context.Context, end time.Time, tally *sustainedTally) {
	for time.Now().Before(end) && ctx.Err() == nil {
		t0 := time.Now()
		id, err := b.createSandbox(ctx)
		if ctx.Err() != nil {
			return // interrupted: not the server's failure
		}
		tally.record("create", time.Since(t0), err)
		if err != nil {
			pause(ctx, sustainedBackoff)
			continue
		}
		t1 := time.Now()
		err = b.deleteOne(ctx, id)
		if ctx.Err() != nil {
			return
		}
		tally.record("delete", time.Since(t1), err)
		if err != nil {
			pause(ctx, sustainedBackoff)
		}
	}
}

// deleteOne deletes sandbox id and waits until it is gone, forgetting it
// once it is.
func (b *bench) deleteOne(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, defaultWait)
	defer cancel()
	if err := b.e.c.DeleteSandbox(ctx, id); err != nil {
		return err
	}
	if err := b.e.c.WaitDeleted(ctx, id); err != nil {
		return err
	}
	b.forget(id)
	return nil
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// sustainedErrors returns the failures of the sustained scenario, nil when
// there were none.
func (b *bench) sustainedErrors() error { return b.susErr }
