package node

import (
	"log/slog"
	"sync"

	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/internal/mempressure"
)

// memoryReport measures the node's memory for each heartbeat and logs the
// changes of the verdict: pressure on and off, and a measure that fails.
type memoryReport struct {
	monitor *mempressure.Monitor
	log     *slog.Logger

	mu sync.Mutex // guards the fields below
	// pressure is the last reported reason; failed whether the last
	// measure failed.
	pressure string
	failed   bool
}

// fill measures memory and sets hb's memory fields; without a monitor, or
// when the measure fails, hb reports none (memory_measured false).
func (r *memoryReport) fill(hb *nodeapiv1.Heartbeat) {
	if r.monitor == nil {
		return
	}
	got := r.monitor.Measure()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !got.Measured {
		if !r.failed {
			r.log.Warn("memory not measured: heartbeats report none until it is, and admission goes by the committed sum", "err", got.Err)
		}
		r.failed = true
		return
	}
	if r.failed {
		r.log.Info("memory measured again", "available_mib", got.AvailableMiB, "total_mib", got.TotalMiB)
	}
	r.failed = false
	switch {
	case got.Pressure != "" && r.pressure == "":
		r.log.Warn("memory pressure: the control plane places no new sandbox here", "reason", got.Pressure, "available_mib", got.AvailableMiB, "total_mib", got.TotalMiB)
	case got.Pressure == "" && r.pressure != "":
		r.log.Info("memory pressure over", "available_mib", got.AvailableMiB, "total_mib", got.TotalMiB)
	}
	r.pressure = got.Pressure
	hb.MemoryMeasured = true
	hb.MemoryTotalMib, hb.AvailableMib, hb.MemoryPressure = int64(got.TotalMiB), int64(got.AvailableMiB), got.Pressure
}
