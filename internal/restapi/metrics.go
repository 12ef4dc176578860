package restapi

import (
	"fmt"
	"math"
	"net/http"
	"strconv"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// handleMetrics is GET /v1/sandboxes/{id}/metrics?start=&end=: the
// sandbox's CPU, memory and disk use from second start to second end (unix
// seconds, both optional and included; absent: its whole life), oldest
// first. It takes the sandbox's read authorization, as its record does.
func (a *API) handleMetrics(w http.ResponseWriter, r *http.Request) {
	sb, err := a.sandboxFor(r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	start, end, err := metricsWindow(r.URL.Query().Get("start"), r.URL.Query().Get("end"))
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	ms, err := a.host.Metrics(r.Context(), sb, start, end)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if ms == nil {
		ms = []sandboxv1.Metric{}
	}
	writeJSON(w, http.StatusOK, sandboxv1.MetricList{Metrics: ms})
}

// metricsWindow parses start and end, unix seconds: an absent start is 0,
// an absent end the largest second.
func metricsWindow(start, end string) (from, to int64, err error) {
	parse := func(name, v string, absent int64) (int64, error) {
		if v == "" {
			return absent, nil
		}
		sec, err := strconv.ParseInt(v, 10, 64)
		if err != nil || sec < 0 || sec > 1<<40 {
			return 0, fmt.Errorf("%w: %s %q: want unix seconds (0 to 2^40)", errdefs.ErrInvalidArgument, name, clip(v))
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
