package benchbase

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spacesandbox/space/internal/benchstat"
	"github.com/spacesandbox/space/internal/driver/vm"
)

// Bounds of the snapshot steps.
const (
	qmpTimeout     = 30 * time.Second
	migrateTimeout = 5 * time.Minute
	// resumeTimeout bounds the wait for the restored guest's next counter.
	resumeTimeout = time.Minute
)

// stateFile is the migration stream in the run's directory.
const stateFile = "guest.state"

// savedGuest is the state of a paused guest saved to a file.
type savedGuest struct {
	path string
	size int64
	// tick is the last counter read before the save; the restored guest
	// continues from there.
	tick uint64
	// took is the time from QMP stop to the migration's completion.
	took time.Duration
}

// save boots the guest in tick mode, waits for its first counter, pauses it
// (QMP stop) and saves its state with QMP migrate into dir/guest.state over
// a descriptor passed on the QMP socket, as the vm runtime checkpoints.
func (g *guest) save(ctx context.Context, dir string) (*savedGuest, error) {
	sock := filepath.Join(dir, "qmp-save.sock")
	p, err := startQEMU(g.args(modeTick, sock, false), nil)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := p.wait(ctx, p.con.tick, bootTimeout, "first counter line"); err != nil {
		return nil, fmt.Errorf("boot: %w", err)
	}
	qctx, cancel := p.context(ctx, migrateTimeout)
	defer cancel()
	q, err := vm.DialQMP(qctx, sock)
	if err != nil {
		return nil, fmt.Errorf("%w%s", err, p.ended())
	}
	defer q.Close()
	t0 := time.Now()
	if _, err := q.Execute("stop", nil); err != nil {
		return nil, err
	}
	// The default bandwidth cap (128 MiB/s) would slow a local save.
	if _, err := q.Execute("migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, stateFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	_, err = q.Execute("getfd", map[string]string{"fdname": "baseline"}, int(f.Fd()))
	f.Close() // QEMU holds its own copy now
	if err != nil {
		return nil, err
	}
	if _, err := q.Execute("migrate", map[string]string{"uri": "fd:baseline"}); err != nil {
		return nil, err
	}
	if err := q.WaitMigration(migrateTimeout); err != nil {
		return nil, fmt.Errorf("save the guest: %w%s", err, p.ended())
	}
	took := time.Since(t0)
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	_, _, last := p.con.ticks()
	return &savedGuest{path: path, size: fi.Size(), tick: last, took: took}, nil
}

// ended returns QEMU's last words if it has exited, else nothing.
func (p *qemuProcess) ended() string {
	if err := p.exitedEarly(); err != nil {
		return ": " + err.Error()
	}
	return ""
}

// restoreTiming is one restore round: until QMP cont was answered, and
// until the guest's next counter line was read.
type restoreTiming struct {
	cont, running time.Duration
}

// snapshotRestore saves the guest once (untimed), then times count restores
// of it, each from the start of QEMU until the restored guest prints its
// next counter. It also returns the saved guest, for the report.
func snapshotRestore(ctx context.Context, g *guest, dir string, count int) (benchstat.Summary, *savedGuest, []restoreTiming, error) {
	saved, err := g.save(ctx, dir)
	if err != nil {
		return benchstat.Summary{}, nil, nil, fmt.Errorf("save: %w", err)
	}
	var durations []time.Duration
	var timings []restoreTiming
	var wall time.Duration
	for i := range count {
		rt, err := g.restoreOnce(ctx, dir, i, saved)
		if err != nil {
			return benchstat.Summary{}, nil, nil, fmt.Errorf("restore %d of %d: %w", i+1, count, err)
		}
		durations = append(durations, rt.running)
		timings = append(timings, rt)
		wall += rt.running
	}
	return benchstat.Summarize(durations, wall, 0), saved, timings, nil
}

func (g *guest) restoreOnce(ctx context.Context, dir string, round int, saved *savedGuest) (restoreTiming, error) {
	f, err := os.Open(saved.path)
	if err != nil {
		return restoreTiming{}, err
	}
	defer f.Close()
	sock := filepath.Join(dir, "qmp-"+strconv.Itoa(round)+".sock")
	argv := g.args(modeTick, sock, true)
	t0 := time.Now()
	p, err := startQEMU(argv, f)
	if err != nil {
		return restoreTiming{}, err
	}
	defer p.stop()
	f.Close() // QEMU has its own copy
	qctx, cancel := p.context(ctx, qmpTimeout)
	defer cancel()
	q, err := vm.DialQMP(qctx, sock)
	if err != nil {
		return restoreTiming{}, fmt.Errorf("%w%s", err, p.ended())
	}
	defer q.Close()
	if err := waitLoaded(qctx, q); err != nil {
		return restoreTiming{}, fmt.Errorf("%w%s", err, p.ended())
	}
	if _, err := q.Execute("cont", nil); err != nil {
		return restoreTiming{}, fmt.Errorf("%w%s", err, p.ended())
	}
	cont := time.Since(t0)
	if err := p.wait(ctx, p.con.tick, resumeTimeout, "counter line after cont"); err != nil {
		return restoreTiming{}, err
	}
	at, first, _ := p.con.ticks()
	// A guest that rebooted instead of continuing would print the boot
	// marker and count from 0 again.
	if !p.con.booted().IsZero() || first < saved.tick {
		return restoreTiming{}, fmt.Errorf("the restored guest did not continue: first counter %d, saved at %d, boot marker seen: %v", first, saved.tick, !p.con.booted().IsZero())
	}
	return restoreTiming{cont: cont, running: at.Sub(t0)}, nil
}

// waitLoaded polls query-status until QEMU has loaded the incoming state
// (it leaves the inmigrate state), as the vm runtime does before cont.
func waitLoaded(ctx context.Context, q *vm.QMP) error {
	for {
		status, err := q.Status()
		if err != nil {
			return fmt.Errorf("load the saved state: %w", err)
		}
		switch status {
		case "paused", "running":
			return nil
		case "inmigrate", "prelaunch":
		default:
			return fmt.Errorf("load the saved state: QEMU is %q", status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("load the saved state: %w", context.Cause(ctx))
		case <-time.After(2 * time.Millisecond):
		}
	}
}
