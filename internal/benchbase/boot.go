package benchbase

import (
	"context"
	"fmt"
	"time"

	"github.com/spacesandbox/space/internal/benchstat"
)

// Bounds of the QEMU rounds (TCG on a loaded 2-core host is slow).
const (
	// bootTimeout bounds a boot to the init's first line.
	bootTimeout = 2 * time.Minute
	// exitWait is how long a round waits for QEMU to end after the guest
	// rebooted, before it is killed.
	exitWait = 10 * time.Second
)

// coldBoot times count boots of the guest, each from the start of QEMU
// until the boot marker is read on the console. Each round then waits
// (untimed) for the guest's reboot to end QEMU, killing it after exitWait.
func coldBoot(ctx context.Context, g *guest, count int) (benchstat.Summary, error) {
	var durations []time.Duration
	var wall time.Duration
	for i := range count {
		d, err := g.bootOnce(ctx)
		if err != nil {
			return benchstat.Summary{}, fmt.Errorf("boot %d of %d: %w", i+1, count, err)
		}
		durations = append(durations, d)
		wall += d
	}
	return benchstat.Summarize(durations, wall, 0), nil
}

func (g *guest) bootOnce(ctx context.Context) (time.Duration, error) {
	argv := g.args(modeBoot, "", false)
	t0 := time.Now()
	p, err := startQEMU(argv, nil)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	if err := p.wait(ctx, p.con.boot, bootTimeout, "boot marker "+fmt.Sprintf("%q", bootMarker)); err != nil {
		return 0, err
	}
	d := p.con.booted().Sub(t0)
	t := time.NewTimer(exitWait)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
	case <-ctx.Done():
	}
	return d, nil
}
