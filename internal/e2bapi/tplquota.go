package e2bapi

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	prom "github.com/spacesandbox/space/internal/metrics"
)

// The uploads a tenant keeps for its builds (tplfiles.go) are bounded: at
// most uploadBounds.count of them and uploadBounds.bytes in all, and one
// no build used (or GET .../files found present) for uploadBounds.age is
// removed. Each upload checks the bounds as it is kept: first the
// uploads past their age, of every tenant, are removed, then a new upload
// that would take its tenant past a bound is refused (429, counted in
// space_e2b_template_upload_refusals_total) and not kept. A build touches
// what it uses, so an upload in use is never the oldest.

// Default upload bounds.
const (
	defaultTenantUploads     = 256
	defaultTenantUploadBytes = 8 << 30
	defaultUploadMaxAge      = 24 * time.Hour
)

// uploadBounds bound a tenant's kept uploads.
type uploadBounds struct {
	count int
	bytes int64
	age   time.Duration
}

// uploadKeeper applies the bounds; mu serializes the admissions, so two
// uploads of one tenant cannot both take its last slot.
type uploadKeeper struct {
	bounds uploadBounds
	mu     sync.Mutex
	// refused counts refusals by bound ("count", "bytes"); expired the
	// uploads removed for their age.
	refused *prom.CounterVec
	expired *prom.CounterVec
}

func newUploadKeeper(b uploadBounds) *uploadKeeper {
	if b.count == 0 {
		b.count = defaultTenantUploads
	}
	if b.bytes == 0 {
		b.bytes = defaultTenantUploadBytes
	}
	if b.age == 0 {
		b.age = defaultUploadMaxAge
	}
	return &uploadKeeper{
		bounds: b,
		refused: prom.NewCounterVec("space_e2b_template_upload_refusals_total",
			"E2B template file uploads refused for their tenant's bound, by bound.", "bound").Always("count", "bytes"),
		expired: prom.NewCounterVec("space_e2b_template_uploads_expired_total",
			"E2B template file uploads removed unused past their age.", "kind").Always("upload"),
	}
}

// WriteMetrics writes the E2B surface's counters.
func (a *API) WriteMetrics(w io.Writer) {
	a.uploads.refused.Write(w)
	a.uploads.expired.Write(w)
}

// keep renames tmp, a checked upload, to dest within its tenant's
// directory dir, unless that takes the tenant past a bound.
func (k *uploadKeeper) keep(filesDir, dir, tmp, dest string, now time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.expire(filesDir, now)
	fi, err := os.Stat(tmp)
	if err != nil {
		return err
	}
	count, total, err := k.usage(dir, tmp, dest)
	if err != nil {
		return err
	}
	b := k.bounds
	switch {
	case count+1 > b.count:
		k.refused.Inc("count")
		return fmt.Errorf("%w: this tenant keeps %d template file uploads, at most %d: an upload no build uses is removed after %s; wait, or build from fewer COPY sources", errdefs.ErrQuotaExceeded, count, b.count, b.age)
	case total+fi.Size() > b.bytes:
		k.refused.Inc("bytes")
		return fmt.Errorf("%w: this tenant's template file uploads would hold %d bytes, at most %d: an upload no build uses is removed after %s; wait, or copy less", errdefs.ErrQuotaExceeded, total+fi.Size(), b.bytes, b.age)
	}
	return os.Rename(tmp, dest)
}

// usage is the count and bytes of the uploads in dir, but tmp and dest
// (which the upload replaces).
func (k *uploadKeeper) usage(dir, tmp, dest string) (int, int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, 0, err
	}
	count, total := 0, int64(0)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if p == tmp || p == dest || !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".upload-") {
			continue // another upload's, still being checked
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		count, total = count+1, total+fi.Size()
	}
	return count, total, nil
}

// expire removes the uploads, of every tenant, that were not used for
// the bound's age, and the temporary files an interrupted upload left.
func (k *uploadKeeper) expire(filesDir string, now time.Time) {
	tenants, err := os.ReadDir(filesDir)
	if err != nil {
		return
	}
	for _, t := range tenants {
		if !t.IsDir() || strings.HasPrefix(t.Name(), ".") {
			continue // the builds' context directories
		}
		dir := filepath.Join(filesDir, t.Name())
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			fi, err := e.Info()
			if err != nil || !e.Type().IsRegular() || now.Sub(fi.ModTime()) <= k.bounds.age {
				continue
			}
			if err := os.Remove(filepath.Join(dir, e.Name())); err == nil || errors.Is(err, os.ErrNotExist) {
				if !strings.HasPrefix(e.Name(), ".upload-") {
					k.expired.Inc("upload")
				}
			}
		}
	}
}

// touch marks upload path used now, so that it is not the next to
// expire.
func touch(path string, now time.Time) {
	_ = os.Chtimes(path, now, now)
}
