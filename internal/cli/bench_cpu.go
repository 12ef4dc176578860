package cli

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/spacesandbox/space/internal/benchbase"
	"github.com/spacesandbox/space/internal/benchstat"
)

// cpuWholeMachine is what the CPU column measures.
const cpuWholeMachine = "the whole machine's busy CPU time (/proc/stat: all but idle and iowait) over the scenario's operations, per operation; " +
	"it counts the server, node and client when they run here, and any other load on the machine"

// machineCPU says whether a run measures the machine's CPU (--machine-cpu):
// for the server's scenarios only when the server runs on this machine, for
// the baselines whenever it is not off (they run here).
type machineCPU struct {
	server, local bool
	text          string // the report's remark on the CPU column
}

// newMachineCPU resolves --machine-cpu: auto measures the server's
// scenarios when the API URL's host is a loopback address or localhost.
func newMachineCPU(mode, apiURL string) (machineCPU, error) {
	switch mode {
	case "off":
		return machineCPU{text: "not measured (--machine-cpu off)"}, nil
	case "on":
		return machineCPU{server: true, local: true, text: cpuWholeMachine}, nil
	case "auto":
		host, local := apiOnThisHost(apiURL)
		if local {
			return machineCPU{server: true, local: true, text: cpuWholeMachine}, nil
		}
		return machineCPU{local: true, text: fmt.Sprintf("not measured for the server's scenarios: the API at %s is not on this host, so this machine's CPU is not the server's "+
			"(--machine-cpu on measures it anyway); the baselines': %s", printable(host), cpuWholeMachine)}, nil
	default:
		return machineCPU{}, fmt.Errorf("--machine-cpu %q: want auto, on or off", mode)
	}
}

// apiOnThisHost returns the API URL's host and whether it is this machine:
// localhost or a loopback address. An address of one of this machine's
// other interfaces counts as remote; --machine-cpu on covers that case.
func apiOnThisHost(apiURL string) (string, bool) {
	u, err := url.Parse(apiURL)
	if err != nil {
		return apiURL, false
	}
	h := u.Hostname()
	if strings.EqualFold(h, "localhost") || strings.HasSuffix(strings.ToLower(h), ".localhost") {
		return h, true
	}
	ip := net.ParseIP(h)
	return h, ip != nil && ip.IsLoopback()
}

// read samples the machine's CPU when the server's scenarios measure it.
func (m machineCPU) read() (benchstat.CPUTimes, error) {
	if !m.server {
		return benchstat.CPUTimes{}, nil
	}
	return benchstat.ReadCPUTimes()
}

// spread adds to s the machine's CPU since start, per operation, when the
// server's scenarios measure it.
func (m machineCPU) spread(s benchstat.Summary, start benchstat.CPUTimes) (benchstat.Summary, error) {
	if !m.server {
		return s, nil
	}
	end, err := benchstat.ReadCPUTimes()
	if err != nil {
		return s, err
	}
	return s.WithCPU(end.BusySince(start)), nil
}

// compare adds the ratios of the scenarios to the baselines that match
// them: an ns create is the namespaced spawn, a vm create the cold QEMU
// boot, a vm restore the QEMU snapshot restore. exec and files have no
// baseline in package benchbase; they get no ratio.
func (b *bench) compare() {
	b.mu.Lock()
	ns, vm := b.runtimes["ns"], b.runtimes["vm"]
	b.mu.Unlock()
	if ns && vm {
		fmt.Fprintln(b.e.stderr, "space: bench: no ratios to the baselines: the run's sandboxes got both runtimes; pass --runtime")
		return
	}
	var pairs [][2]string
	switch {
	case ns:
		pairs = [][2]string{{"create", benchbase.RowSpawn}, {"sustained_create", benchbase.RowSpawn}}
	case vm:
		pairs = [][2]string{{"create", benchbase.RowBoot}, {"sustained_create", benchbase.RowBoot}, {"restore", benchbase.RowRestore}}
	}
	for _, p := range pairs {
		b.report.Compare(p[0], p[1])
	}
}
