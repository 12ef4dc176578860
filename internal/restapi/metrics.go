package restapi

import (
	"net/http"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/service"
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
	start, end, err := service.MetricsWindow(r.URL.Query().Get("start"), r.URL.Query().Get("end"))
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
