package btrfs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSnapshotQuota measures what quotas cost a sandbox's volume
// lifecycle: one iteration makes a volume from a template and from a
// snapshot (Clone, CloneSnapshot, with Limit where quotas are on), deletes
// them, and commits the filesystem; the drops of the deleted subvolumes are
// waited for at the end. It runs on
// three stores side by side in the same run: quotas off, simple quotas, and
// classic quota groups. It reports each store's time per iteration and the
// ratios to quotas off.
func BenchmarkSnapshotQuota(b *testing.B) {
	ctx := context.Background()
	stores := []struct {
		name  string
		setup func(b *testing.B) *Driver
		total time.Duration
	}{
		{name: "off", setup: func(b *testing.B) *Driver { return benchStore(b, "", Config{NoQuota: true}) }},
		{name: "squota", setup: func(b *testing.B) *Driver { return benchStore(b, "", Config{}) }},
		{name: "qgroup", setup: func(b *testing.B) *Driver { return benchStore(b, "classic", Config{}) }},
	}
	drivers := make([]*Driver, len(stores))
	for i := range stores {
		drivers[i] = stores[i].setup(b)
	}
	if m, _ := drivers[1].QuotaMode(); m != quotaSimple {
		b.Fatalf("the squota store is in mode %q", m)
	}
	if m, _ := drivers[2].QuotaMode(); m != quotaClassic {
		b.Fatalf("the classic store is in mode %q", m)
	}
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		// Each iteration starts with another store, so none always goes
		// first (or after the same neighbour) on the shared disk.
		for j := range drivers {
			i := (n + j) % len(drivers)
			d := drivers[i]
			t0 := time.Now()
			if err := volumeLifecycle(ctx, d, fmt.Sprint("v", n)); err != nil {
				b.Fatalf("%s: %v", stores[i].name, err)
			}
			stores[i].total += time.Since(t0)
		}
	}
	// The cleaner drops deleted subvolumes in the background, where classic
	// quota groups pay for their accounting: wait for it, on each store's
	// clock (btrfs-progs polls once a second, the same for every store).
	for i, d := range drivers {
		t0 := time.Now()
		if err := run(ctx, "subvolume", "sync", d.layout.Root); err != nil {
			b.Fatal(err)
		}
		stores[i].total += time.Since(t0)
	}
	b.StopTimer()
	base := float64(stores[0].total.Nanoseconds()) / float64(b.N)
	for _, s := range stores {
		per := float64(s.total.Nanoseconds()) / float64(b.N)
		b.ReportMetric(per/1e6, "ms/"+s.name)
		if s.name != "off" {
			b.ReportMetric(per/base, s.name+"/off")
		}
	}
}

// volumeLifecycle is one sandbox's volumes: started from the template,
// snapshotted (stop), started again from the snapshot, then all deleted.
func volumeLifecycle(ctx context.Context, d *Driver, id string) error {
	if _, err := d.Clone(ctx, "base", id); err != nil {
		return err
	}
	mode, _ := d.QuotaMode()
	limit := func(v string) error {
		if mode == "" {
			return nil // quotas off: nothing to limit
		}
		return d.Limit(ctx, v, 64<<20)
	}
	if err := limit(id); err != nil {
		return err
	}
	if _, err := d.Snapshot(ctx, id, id+"-snap"); err != nil {
		return err
	}
	if _, err := d.CloneSnapshot(ctx, id+"-snap", id+"-2"); err != nil {
		return err
	}
	if err := limit(id + "-2"); err != nil {
		return err
	}
	for _, del := range []func() error{
		func() error { return d.Delete(ctx, id) },
		func() error { return d.DeleteSnapshot(ctx, id+"-snap") },
		func() error { return d.Delete(ctx, id+"-2") },
		func() error { return run(ctx, "filesystem", "sync", d.layout.Root) },
	} {
		if err := del(); err != nil {
			return err
		}
	}
	return nil
}

// benchStore is a store on its own loopback with template "base": 2,000
// files of 8 KiB in 20 directories. mode "classic" turns classic quota
// groups on before the driver opens the filesystem.
func benchStore(b *testing.B, mode string, cfg Config) *Driver {
	b.Helper()
	mnt := loopbackOf(b, 1<<30)
	if mode == "classic" {
		if err := run(context.Background(), "quota", "enable", mnt); err != nil {
			b.Fatal(err)
		}
	}
	d, err := NewWithConfig(filepath.Join(mnt, "store"), cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	tpl, err := d.CreateTemplate(ctx, "base")
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 8<<10)
	for i := range 2000 {
		dir := filepath.Join(tpl, fmt.Sprint("d", i%20))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		buf[0] = byte(i)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.SealTemplate(ctx, "base"); err != nil {
		b.Fatal(err)
	}
	return d
}
