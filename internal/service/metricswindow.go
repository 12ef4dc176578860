package service

import (
	"fmt"
	"math"
	"strconv"

	"github.com/spacesandbox/space/internal/errdefs"
)

// MetricsWindow parses a metrics request's start and end, unix seconds
// (SPACE's GET /v1/sandboxes/{id}/metrics and E2B's getMetrics): an absent
// start is 0, an absent end the largest second; each is 0 to 2^40, and end
// is not before start.
func MetricsWindow(start, end string) (from, to int64, err error) {
	parse := func(name, v string, absent int64) (int64, error) {
		if v == "" {
			return absent, nil
		}
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil || sec < 0 || sec > 1<<40 {
			return 0, fmt.Errorf("%w: %s %q: want unix seconds (0 to 2^40)", errdefs.ErrInvalidArgument, name, Clip(v))
		}
		return sec, nil
	}
	if from, err = parse("start", start, 0); err != nil {
		return 0, 0, err
	}
	if to, err = parse("end", end, math.MaxInt64); err != nil {
		return 0, 0, err
	}
	if to < from {
		return 0, 0, fmt.Errorf("%w: end %d is before start %d", errdefs.ErrInvalidArgument, to, from)
	}
	return from, to, nil
}
