package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/benchbase"
	"github.com/spacesandbox/space/internal/benchstat"
	space "github.com/spacesandbox/space/sdk/go"
)

func init() {
	commands = append(commands, &command{
		path:    "bench",
		args:    "create|exec|files|lifecycle|sustained|baseline|all [--baselines] [--machine-cpu auto|on|off] [--runtime vm|ns] [--template T] [--concurrency N] [--count M] [--clients N --duration D] [-o json]",
		summary: "measure a running server through the public API, or the bare primitives on this machine (baseline): p50/p90/p99/max latency, ops/s and the machine's CPU per operation per scenario (docs/PERFORMANCE.md)",
		// Its own signal handling: the first interrupt stops the measurements
		// and still deletes what the benchmark created; a second one gives up.
		ownSignals: true,
		run:        runBench,
	})
}

// Bounds of the bench flags.
const (
	maxBenchCount       = 10000
	maxBenchConcurrency = 256
	// benchFileSize is what the files scenario writes and reads back.
	benchFileSize = benchstat.MiB
	// benchLargeFileSize is the large file of the files scenario.
	benchLargeFileSize = 100 * benchstat.MiB
	// benchMaxSnapshots is how many snapshots the lifecycle scenario takes.
	benchMaxSnapshots = 5
	// benchCleanupRounds and benchCleanupEvery bound the search for
	// sandboxes whose create completed on the server after the client gave
	// up on it.
	benchCleanupRounds = 10
	benchCleanupEvery  = 500 * time.Millisecond
	// benchCleanupWait bounds one round of deleting what the benchmark created.
	benchCleanupWait = 5 * time.Minute
)

// benchScenarios lists the scenarios in the order `all` runs them.
var benchScenarios = []string{"create", "exec", "files", "lifecycle"}

// bench is one run of `space bench`.
type bench struct {
	e           *env
	req         sandboxv1.CreateSandboxRequest // what each sandbox is created from
	concurrency int
	count       int
	runID       string // names the run's sandboxes, "bench-<runID>-<n>"
	report      benchstat.Report

	mu      sync.Mutex // guards created, nameSeq and unknown
	created []string   // sandboxes the run created and has not deleted yet
	nameSeq int
	// unknown counts creates that failed without an id: the server may still
	// have made the sandbox, which cleanup then finds by its name.
	unknown int

	shared string // the sandbox exec, files and lifecycle run in; "" until made

	cpu      machineCPU
	sus      sustainedConfig
	runtimes map[string]bool // guarded by mu: the runtimes the run's sandboxes got
	susErr   error           // the sustained scenario's failed operations
}

func runBench(ctx context.Context, e *env, args []string) error {
	fs := newFlags("bench")
	b := &bench{e: e}
	fs.StringVar(&b.req.Runtime, "runtime", "", "runtime of the sandboxes: vm or ns (default: the server's choice)")
	fs.StringVar(&b.req.Template, "template", "minimal", "template of the sandboxes")
	fs.IntVar(&b.concurrency, "concurrency", 1, "parallel creates in the create scenario")
	fs.IntVar(&b.count, "count", 20, "timed operations per scenario (snapshots: at most 5)")
	fs.IntVar(&b.req.CPUs, "cpus", 0, "CPUs of each sandbox (default: the server's); match a --warm-pool size to measure pool hits")
	fs.IntVar(&b.req.MemoryMiB, "memory", 0, "memory of each sandbox in MiB (default: the server's)")
	// The baselines need root, QEMU and the local machine, so `all` runs
	// them only when asked.
	baselines := fs.Bool("baselines", false, "also measure the bare primitives on this machine (the baseline scenario; needs root and QEMU) and print each scenario's ratio to its baseline")
	cpuMode := fs.String("machine-cpu", "auto", "measure the machine's CPU per operation from /proc/stat: on, off, or auto (on when the API URL is on this host)")
	fs.IntVar(&b.sus.clients, "clients", 4, "sustained: clients, each looping create and delete")
	fs.DurationVar(&b.sus.duration, "duration", 30*time.Second, "sustained: how long the clients start new creates")
	out := outputFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs(fs, pos, 1, 1, "SCENARIO"); err != nil {
		return err
	}
	scenarios := []string{pos[0]}
	switch pos[0] {
	case "all":
		scenarios = benchScenarios
		if *baselines {
			scenarios = append(slices.Clone(scenarios), "baseline")
		}
	case "create", "exec", "files", "lifecycle", "sustained":
		if *baselines {
			scenarios = append(scenarios, "baseline")
		}
	case "baseline":
		if *baselines {
			return usagef(fs, "--baselines goes with the server's scenarios; `space bench baseline` measures the baselines alone")
		}
	default:
		return usagef(fs, "scenario %q: want create, exec, files, lifecycle, sustained, baseline or all", pos[0])
	}
	if b.sus.clients < 1 || b.sus.clients > maxBenchConcurrency {
		return usagef(fs, "--clients %d: want 1 to %d", b.sus.clients, maxBenchConcurrency)
	}
	if b.sus.duration <= 0 || b.sus.duration > maxSustainedDuration {
		return usagef(fs, "--duration %s: want more than 0 and at most %s", b.sus.duration, maxSustainedDuration)
	}
	b.cpu, err = newMachineCPU(*cpuMode, e.apiURL)
	if err != nil {
		return usagef(fs, "%v", err)
	}
	b.report.CPU = b.cpu.text
	if b.req.Runtime != "" && b.req.Runtime != "vm" && b.req.Runtime != "ns" {
		return usagef(fs, "--runtime %q: want vm or ns", b.req.Runtime)
	}
	if b.req.Template == "" {
		return usagef(fs, "--template is empty")
	}
	if b.count < 1 || b.count > maxBenchCount {
		return usagef(fs, "--count %d: want 1 to %d", b.count, maxBenchCount)
	}
	if b.concurrency < 1 || b.concurrency > maxBenchConcurrency {
		return usagef(fs, "--concurrency %d: want 1 to %d", b.concurrency, maxBenchConcurrency)
	}
	var id [4]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("bench: run id: %w", err)
	}
	b.runID = hex.EncodeToString(id[:])
	b.report.Machine = benchstat.ReadMachine()

	// First interrupt: cancel the measurements (cleanup still runs). Second:
	// cancel the cleanup too.
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	cleanCtx, stopClean := context.WithCancel(context.WithoutCancel(ctx))
	defer stopClean()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Add(1)
	go func() {
		defer watcher.Done()
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-sigs:
				if n == 0 {
					fmt.Fprintln(e.stderr, "space: bench: interrupted; deleting the sandboxes it created (interrupt again to leave them)")
					stopRun()
				} else {
					stopClean()
					return
				}
			}
		}
	}()
	defer func() { close(done); watcher.Wait() }()

	runErr := b.run(runCtx, cleanCtx, scenarios)
	cleanErr := b.cleanup(cleanCtx, "")
	if runErr == nil && *baselines {
		b.compare()
	}
	var susErr error
	if runErr == nil && cleanErr == nil {
		susErr = b.sustainedErrors()
	}
	if susErr != nil {
		// The figures are complete and the failures are in them: the
		// report goes to stdout, the exit status says some operations failed.
		if out.json() {
			_ = writeJSON(e.stdout, b.report)
		} else {
			_ = b.report.WriteTable(e.stdout)
		}
		return errors.New(benchMessage(e, susErr))
	}
	if err := errors.Join(runErr, cleanErr); err != nil {
		if !out.json() && len(b.report.Scenarios) > 0 {
			// Scenarios that finished before the failure, on stderr: stdout
			// only ever holds a complete result.
			fmt.Fprintln(e.stderr, "space: bench: scenarios completed before the error:")
			_ = b.report.WriteTable(e.stderr)
		}
		return errors.New(benchMessage(e, err))
	}
	if out.json() {
		return writeJSON(e.stdout, b.report)
	}
	return b.report.WriteTable(e.stdout)
}

// benchMessage is the text of a failed run, at the CLI's edge: the whole chain
// (scenario, round, operation, cause), with an API error shown the way the CLI
// shows it (the server's message, and where the key came from on a 401). The
// CLI's printer would show only the server's message of an error that unwraps
// to an API error, which hides which operation failed; hence the flattening.
func benchMessage(e *env, err error) string {
	text := err.Error()
	var ae *space.APIError
	if errors.As(err, &ae) {
		text = strings.Replace(text, ae.Error(), e.message(ae), 1)
	}
	return text
}

// run runs the scenarios in order, stopping at the first error. cleanCtx is
// for deleting what a scenario made, which an interrupt of ctx must not stop.
func (b *bench) run(ctx, cleanCtx context.Context, scenarios []string) error {
	for _, s := range scenarios {
		var err error
		switch s {
		case "create":
			err = b.create(ctx)
			if err == nil {
				// Not timed; frees the capacity before the next scenario.
				err = b.cleanup(cleanCtx, b.shared)
			}
		case "exec":
			err = b.exec(ctx)
		case "files":
			err = b.files(ctx)
		case "lifecycle":
			err = b.lifecycle(ctx)
		case "sustained":
			err = b.sustained(ctx)
		case "baseline":
			// Local, without the server: see package benchbase.
			err = benchbase.Run(ctx, benchbase.Config{
				Count:      b.count,
				MachineCPU: b.cpu.local,
				Log:        slog.New(slog.NewTextHandler(b.e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
			}, &b.report)
		}
		if err != nil {
			return fmt.Errorf("bench %s: %w", s, err)
		}
	}
	return nil
}

// nextName returns a name for a new sandbox of this run: a sandbox whose
// create was cut short is found by its name at cleanup.
func (b *bench) nextName() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nameSeq++
	return fmt.Sprintf("bench-%s-%d", b.runID, b.nameSeq)
}

// remember records a sandbox to delete at the end.
func (b *bench) remember(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = append(b.created, id)
}

// forget drops a sandbox the run already deleted.
func (b *bench) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.created = slices.DeleteFunc(b.created, func(c string) bool { return c == id })
}

// createSandbox creates one sandbox and waits until it runs, remembering it
// for cleanup as soon as its id is known.
func (b *bench) createSandbox(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, defaultWait)
	defer cancel()
	req := b.req
	req.Name = b.nextName()
	sb, err := b.e.c.CreateSandbox(ctx, req)
	if err != nil {
		b.mu.Lock()
		b.unknown++
		b.mu.Unlock()
		return "", err
	}
	b.remember(sb.ID)
	b.mu.Lock()
	if b.runtimes == nil {
		b.runtimes = map[string]bool{}
	}
	b.runtimes[sb.Runtime] = true
	b.mu.Unlock()
	if sb.State != sandboxv1.StateRunning {
		if _, err := b.e.c.WaitForState(ctx, sb.ID, sandboxv1.StateRunning); err != nil {
			return "", err
		}
	}
	return sb.ID, nil
}

// create times count creates, concurrency at a time, each from the request
// to the sandbox running.
func (b *bench) create(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan struct{}, b.count)
	for range b.count {
		jobs <- struct{}{}
	}
	close(jobs)
	var (
		mu        sync.Mutex // guards durations and firstErr
		durations []time.Duration
		firstErr  error
		wg        sync.WaitGroup
	)
	var ids []string // guarded by mu
	c0, err := b.cpu.read()
	if err != nil {
		return err
	}
	start := time.Now()
	for range min(b.concurrency, b.count) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				if ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				id, err := b.createSandbox(ctx)
				d := time.Since(t0)
				mu.Lock()
				ids = append(ids, id)
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel() // the first failure stops the scenario
					return
				}
				durations = append(durations, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return firstErr
	}
	sum, err := b.cpu.spread(benchstat.Summarize(durations, wall, 0), c0)
	if err != nil {
		return err
	}
	b.report.Add("create", sum)
	b.report.Note("create", fmt.Sprintf("%d of %d from a warm pool", b.warmCount(ctx, ids), len(ids)))
	return nil
}

// warmCount counts the sandboxes among ids that claimed a prepared
// execution, as their events say (after the timing: it costs a request
// each).
func (b *bench) warmCount(ctx context.Context, ids []string) int {
	n := 0
	for _, id := range ids {
		events, err := b.e.c.ListEvents(ctx, id)
		if err != nil {
			continue
		}
		for _, ev := range events {
			if ev.Type == "state" && strings.Contains(ev.Message, "warm pool") {
				n++
				break
			}
		}
	}
	return n
}

// sandbox returns the sandbox that exec, files and lifecycle share, creating
// it (untimed) on first use.
func (b *bench) sandbox(ctx context.Context) (string, error) {
	if b.shared != "" {
		return b.shared, nil
	}
	id, err := b.createSandbox(ctx)
	if err != nil {
		return "", fmt.Errorf("set up: %w", err)
	}
	b.shared = id
	return id, nil
}

// timer collects the durations of one scenario's operations; its wall time
// is their sum, for scenarios whose operations interleave with others. With
// cpu set it also sums the machine's busy CPU time over each operation.
type timer struct {
	durations []time.Duration
	wall      time.Duration
	cpu       bool
	busy      time.Duration
}

// newTimer returns a timer that measures the machine's CPU when the run does.
func (b *bench) newTimer() timer { return timer{cpu: b.cpu.server} }

// time runs op and records how long it took when it succeeds.
func (t *timer) time(op func() error) error {
	var c0 benchstat.CPUTimes
	if t.cpu {
		var err error
		if c0, err = benchstat.ReadCPUTimes(); err != nil {
			return err
		}
	}
	t0 := time.Now()
	if err := op(); err != nil {
		return err
	}
	d := time.Since(t0)
	if t.cpu {
		c1, err := benchstat.ReadCPUTimes()
		if err != nil {
			return err
		}
		t.busy += c1.BusySince(c0)
	}
	t.durations = append(t.durations, d)
	t.wall += d
	return nil
}

// summary returns the figures of the recorded operations.
func (t *timer) summary(bytesPerOp int64) benchstat.Summary {
	s := benchstat.Summarize(t.durations, t.wall, bytesPerOp)
	if t.cpu {
		s = s.WithCPU(t.busy)
	}
	return s
}

// exec times count runs of `true` to completion.
func (b *bench) exec(ctx context.Context) error {
	id, err := b.sandbox(ctx)
	if err != nil {
		return err
	}
	t := b.newTimer()
	for i := range b.count {
		err := t.time(func() error {
			res, err := b.e.c.Exec(ctx, id, sandboxv1.ExecRequest{Cmd: []string{"true"}, Timeout: "60s"})
			if err != nil {
				return err
			}
			if res.ExitCode != 0 {
				stderr := res.Stderr[:min(len(res.Stderr), 200)]
				return fmt.Errorf("exec %q in sandbox %s: exit code %d: %s", "true", id, res.ExitCode, printable(strings.TrimSpace(stderr)))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("run %d of %d: %w", i+1, b.count, err)
		}
	}
	b.report.Add("exec", t.summary(0))
	return nil
}

// files times count writes of 1 MiB and reads of it back, checking that the
// bytes read are the bytes written. Each round writes different content, so
// a stale read cannot pass.
func (b *bench) files(ctx context.Context) error {
	id, err := b.sandbox(ctx)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name   string
		size   int64
		rounds int
	}{
		{"1mib", benchFileSize, b.count},
		{"100mib", benchLargeFileSize, min(b.count, benchMaxHeavy)},
	} {
		w, r, err := b.fileRounds(ctx, id, f.size, f.rounds)
		if err != nil {
			return fmt.Errorf("%s files: %w", f.name, err)
		}
		b.report.Add("files_write_"+f.name, w.summary(f.size))
		b.report.Add("files_read_"+f.name, r.summary(f.size))
	}
	return nil
}

// fileRounds writes a file of size bytes to sandbox id and reads it back,
// rounds times, checking every byte read against the bytes written, then
// removes it. The check compares as the bytes arrive (fileCheck): a hash
// of 100 MiB (SHA-256, 65–300 ms of this client's CPU here) inside the
// timed read would be most of what a read at 1 GiB/s takes.
func (b *bench) fileRounds(ctx context.Context, id string, size int64, rounds int) (w, r timer, err error) {
	w, r = b.newTimer(), b.newTimer()
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		return w, r, fmt.Errorf("make test data: %w", err)
	}
	path := "/tmp/space-bench-" + b.runID
	for i := range rounds {
		binary.BigEndian.PutUint64(data, uint64(i))
		if err := w.time(func() error { return b.e.c.WriteFile(ctx, id, path, bytes.NewReader(data)) }); err != nil {
			return w, r, fmt.Errorf("round %d of %d: %w", i+1, rounds, err)
		}
		check := &fileCheck{want: data}
		err := r.time(func() error {
			rc, err := b.e.c.ReadFile(ctx, id, path)
			if err != nil {
				return err
			}
			defer rc.Close()
			// One byte more than was written shows a longer file.
			if _, err := io.Copy(check, io.LimitReader(rc, size+1)); err != nil {
				return fmt.Errorf("read %s in sandbox %s: %w", path, id, err)
			}
			return nil
		})
		if err != nil {
			return w, r, fmt.Errorf("round %d of %d: %w", i+1, rounds, err)
		}
		if err := check.result(); err != nil {
			return w, r, fmt.Errorf("round %d of %d: read %s in sandbox %s: %w", i+1, rounds, path, id, err)
		}
	}
	if err := b.e.c.RemoveFile(ctx, id, path); err != nil {
		return w, r, fmt.Errorf("clean up: %w", err)
	}
	return w, r, nil
}

// fileCheck is an io.Writer that compares what is written to it with want,
// byte for byte, as it arrives: result reports the first byte that differs,
// or a length other than want's.
type fileCheck struct {
	want     []byte
	n        int64
	mismatch int64 // offset of the first differing byte; -1 for none
	checked  bool
}

func (c *fileCheck) Write(p []byte) (int, error) {
	if !c.checked {
		c.checked, c.mismatch = true, -1
	}
	if c.mismatch < 0 {
		rest := c.want[min(c.n, int64(len(c.want))):]
		m := min(len(p), len(rest))
		if !bytes.Equal(p[:m], rest[:m]) {
			for i := range m {
				if p[i] != rest[i] {
					c.mismatch = c.n + int64(i)
					break
				}
			}
		}
	}
	c.n += int64(len(p))
	return len(p), nil
}

func (c *fileCheck) result() error {
	switch {
	case c.checked && c.mismatch >= 0:
		return fmt.Errorf("byte %d differs from what was written (got %d bytes, wrote %d)", c.mismatch, c.n, len(c.want))
	case c.n != int64(len(c.want)):
		return fmt.Errorf("got %d bytes, wrote %d", c.n, len(c.want))
	}
	return nil
}

// lifecycle times count pauses and resumes (each until the target state) and
// min(count, 5) disk snapshots (each until ready), then deletes the snapshots.
func (b *bench) lifecycle(ctx context.Context) error {
	id, err := b.sandbox(ctx)
	if err != nil {
		return err
	}
	pause, resume, snap := b.newTimer(), b.newTimer(), b.newTimer()
	for i := range b.count {
		if err := pause.time(func() error { return b.toState(ctx, id, "pause", sandboxv1.StatePaused) }); err != nil {
			return fmt.Errorf("round %d of %d: %w", i+1, b.count, err)
		}
		if err := resume.time(func() error { return b.toState(ctx, id, "resume", sandboxv1.StateRunning) }); err != nil {
			return fmt.Errorf("round %d of %d: %w", i+1, b.count, err)
		}
	}
	var snaps []string
	var snapErr error
	for i := range min(b.count, benchMaxSnapshots) {
		err := snap.time(func() error {
			s, err := b.snapshotOf(ctx, id, sandboxv1.SnapshotDisk)
			if s != "" {
				snaps = append(snaps, s)
			}
			return err
		})
		if err != nil {
			snapErr = fmt.Errorf("snapshot %d of %d: %w", i+1, min(b.count, benchMaxSnapshots), err)
			break
		}
	}
	var heavy []benchstat.Scenario
	if snapErr == nil && len(snaps) > 0 {
		// The operations that move the whole sandbox; rollback goes back
		// to the first disk snapshot.
		heavy, snapErr = b.lifecycleHeavy(ctx, id, snaps[0])
	}
	// The snapshots go with the sandbox too; deleting them here keeps a
	// shared sandbox light for what follows.
	var delErr error
	if heavy != nil {
		// The sandbox now runs from the snapshot it was rolled back to:
		// that one goes with the sandbox.
		snaps = snaps[1:]
	}
	for _, s := range snaps {
		if err := b.e.c.DeleteSnapshot(context.WithoutCancel(ctx), id, s); err != nil && delErr == nil {
			delErr = fmt.Errorf("clean up: %w", err)
		}
	}
	if err := errors.Join(snapErr, delErr); err != nil {
		return err
	}
	b.report.Add("pause", pause.summary(0))
	b.report.Add("resume", resume.summary(0))
	b.report.Add("snapshot_disk", snap.summary(0))
	b.report.Scenarios = append(b.report.Scenarios, heavy...)
	return nil
}

// toState performs a lifecycle operation and waits for its target state.
func (b *bench) toState(ctx context.Context, id, verb string, target sandboxv1.State) error {
	ctx, cancel := context.WithTimeout(ctx, defaultWait)
	defer cancel()
	var sb *sandboxv1.Sandbox
	var err error
	switch verb {
	case "pause":
		sb, err = b.e.c.PauseSandbox(ctx, id)
	case "resume":
		sb, err = b.e.c.ResumeSandbox(ctx, id)
	case "hibernate":
		sb, err = b.e.c.HibernateSandbox(ctx, id)
	case "restore":
		sb, err = b.e.c.RestoreSandbox(ctx, id)
	default:
		return fmt.Errorf("bench: unknown lifecycle operation %q", verb)
	}
	if err != nil {
		return err
	}
	if sb.State != target {
		_, err = b.e.c.WaitForState(ctx, id, target)
	}
	return err
}

// snapshotOf takes a snapshot of kind of id and waits until it is ready. It returns
// the snapshot's id whenever the server assigned one, so it can be deleted.
func (b *bench) snapshotOf(ctx context.Context, id, kind string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, defaultWait)
	defer cancel()
	s, err := b.e.c.CreateSnapshot(ctx, id, sandboxv1.CreateSnapshotRequest{Kind: kind})
	if err != nil {
		return "", err
	}
	wait := 50 * time.Millisecond
	for {
		switch s.State {
		case "ready":
			return s.ID, nil
		case "failed":
			return s.ID, fmt.Errorf("snapshot %s of sandbox %s failed: %s", s.ID, id, printable(s.Reason))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return s.ID, fmt.Errorf("wait for snapshot %s of sandbox %s to be ready (now %s): %w", s.ID, id, printable(s.State), ctx.Err())
		case <-t.C:
		}
		wait = min(wait*3/2, time.Second)
		list, err := b.e.c.ListSnapshots(ctx, id)
		if err != nil {
			return s.ID, err
		}
		found := false
		for _, cur := range list {
			if cur.ID == s.ID {
				s, found = &cur, true
				break
			}
		}
		if !found {
			return s.ID, fmt.Errorf("snapshot %s of sandbox %s: gone while waiting for it to be ready", s.ID, id)
		}
	}
}

// cleanup deletes every sandbox the run created but keep, including any
// whose create failed before its id came back (found by the run's name
// prefix), and waits until they are gone.
func (b *bench) cleanup(ctx context.Context, keep string) error {
	ctx, cancel := context.WithTimeout(ctx, benchCleanupWait)
	defer cancel()
	b.mu.Lock()
	var ids, kept []string
	for _, id := range b.created {
		if id == keep {
			kept = append(kept, id)
		} else {
			ids = append(ids, id)
		}
	}
	b.created = kept
	unknown := b.unknown
	b.unknown = 0
	b.mu.Unlock()
	if err := b.deleteAll(ctx, ids); err != nil {
		return err
	}
	// A create that failed on this side may still complete on the server
	// (it was under way when the client gave up): look for the run's
	// sandboxes by name until a listing a moment later finds no new one.
	deleted := map[string]bool{keep: true}
	for _, id := range ids {
		deleted[id] = true
	}
	for round := 0; unknown > 0; round++ {
		list, err := b.e.c.ListSandboxes(ctx)
		if err != nil {
			return fmt.Errorf("bench: clean up: find the run's sandboxes: %w", err)
		}
		prefix := "bench-" + b.runID + "-"
		var late []string
		for _, sb := range list {
			if strings.HasPrefix(sb.Name, prefix) && !deleted[sb.ID] {
				late = append(late, sb.ID)
				deleted[sb.ID] = true
			}
		}
		if err := b.deleteAll(ctx, late); err != nil {
			return err
		}
		if len(late) == 0 && round > 0 || round >= benchCleanupRounds {
			break
		}
		t := time.NewTimer(benchCleanupEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("bench: clean up: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// deleteAll deletes sandboxes, concurrency at a time, and waits until they
// are gone.
func (b *bench) deleteAll(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	sem := make(chan struct{}, max(b.concurrency, 1))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards errs
		errs []error
	)
	for _, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := b.e.c.DeleteSandbox(ctx, id)
			if space.IsNotFound(err) {
				return // already gone
			}
			if err == nil {
				err = b.e.c.WaitDeleted(ctx, id)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("bench: clean up (%d of %d sandboxes not deleted): %w", len(errs), len(ids), errors.Join(errs...))
	}
	return nil
}
