package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/spacesandbox/space/internal/hostbin"
	"github.com/spacesandbox/space/internal/kms"
	"github.com/spacesandbox/space/internal/mempressure"
	"github.com/spacesandbox/space/internal/node"
	"github.com/spacesandbox/space/internal/objstore"
	"github.com/spacesandbox/space/internal/privop"
)

// runNode is `space node --server URL --join-token T`: the sandbox manager of
// one node, talking to a node-manager already running on this machine.
func runNode(args []string) int {
	if len(args) > 0 && args[0] == "gc" {
		return runNodeGC(args[1:], os.Stdout, os.Stderr)
	}
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	serverURL := fs.String("server", "http://127.0.0.1:7070", "control plane URL")
	joinToken := fs.String("join-token", os.Getenv("SPACE_JOIN_TOKEN"), "join token (DATA/join.token of the server)")
	dataDir := fs.String("data-dir", "", "data directory")
	nodeID := fs.String("id", "", "node id (default: the host name)")
	listen := fs.String("listen", "", "node-api address, unix:PATH or HOST:PORT (default unix:DATA/run/node.sock)")
	advertise := fs.String("advertise", "", "address the control plane uses to reach this node (default: --listen)")
	pmSocket := fs.String("node-manager", "", "node-manager socket (default DATA/run/node-manager.sock)")
	objectStore := fs.String("object-store", "", "object store URL for hibernated snapshots (default file://DATA/objects; the control plane's)")
	kmsDir := fs.String("kms-dir", "", "directory of the local-file KMS (default DATA/kms; the control plane's)")
	hostBridge := fs.String("host-bridge", "", "space-host-bridge binary, started once per execution (default: beside this binary)")
	memThreshold := addMemoryPressureFlag(fs, "")
	gwFlags := addGatewayFlags(fs)
	fs.Usage = func() {
		// The first line stays flag's own: deploy/kubernetes checks it.
		fmt.Fprintln(fs.Output(), "Usage of node:")
		fmt.Fprintln(fs.Output(), "  space node --server URL --join-token T [flags]")
		fmt.Fprintln(fs.Output(), "  space node gc [--dry-run] [--data-dir DIR] [-o json]   stop the executions no runtime record refers to")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	gw, err := gwFlags.config()
	if err != nil {
		fmt.Fprintf(os.Stderr, "space node: %v\n", err)
		return 2
	}
	mem, err := memoryMonitor(*memThreshold)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space node: %v\n", err)
		return 2
	}
	if *joinToken == "" {
		fmt.Fprintln(os.Stderr, "space node: --join-token is required")
		return 2
	}
	dir, err := resolveDataDir(*dataDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space node: %v\n", err)
		return 1
	}
	id := *nodeID
	if id == "" {
		h, _ := os.Hostname()
		id = strings.ToLower(strings.Split(h, ".")[0])
	}
	if *listen == "" {
		*listen = "unix:" + filepath.Join(dir, "run", "node.sock")
	}
	if *pmSocket == "" {
		*pmSocket = filepath.Join(dir, "run", "node-manager.sock")
	}
	if *hostBridge, err = hostBridgeBinary(*hostBridge); err != nil {
		fmt.Fprintf(os.Stderr, "space node: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := newLogger()
	objs, keys, err := serverOptions{dataDir: dir, objectStore: *objectStore, kmsDir: *kmsDir}.storage(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space node: %v\n", err)
		return 1
	}
	defer objs.Close()
	err = runNodeWith(ctx, nodeOptions{
		dataDir: dir, nodeID: id, server: *serverURL, joinToken: *joinToken,
		listen: *listen, advertise: *advertise, pm: privop.NewClient(*pmSocket),
		objects: objs, kms: keys, gateway: gw, hostBridge: *hostBridge, memory: mem,
	}, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space node: %v\n", err)
		return 1
	}
	return 0
}

type nodeOptions struct {
	dataDir, nodeID, server, joinToken, listen, advertise string
	hostBridge                                            string
	pm                                                    *privop.Client
	objects                                               objstore.Store
	kms                                                   kms.KMS
	gateway                                               *node.GatewayConfig
	// memory measures the node's memory for its heartbeats.
	memory *mempressure.Monitor
	// extraMetrics, when set, writes more of the node's metrics (the
	// --dev server's node-manager restarts).
	extraMetrics func(io.Writer)
}

// addMemoryPressureFlag adds --memory-pressure-threshold to fs, its usage
// starting with prefix.
func addMemoryPressureFlag(fs *flag.FlagSet, prefix string) *float64 {
	return fs.Float64("memory-pressure-threshold", mempressure.DefaultThreshold, prefix+fmt.Sprintf("percent of the node's memory: while MemAvailable is below it (or memory PSI some avg10 is %g or more) the node reports memory pressure and the control plane places no new sandbox there; the pressure ends once MemAvailable is back to twice it and PSI below half its threshold (see docs/scale-out.md)", mempressure.DefaultPSIThreshold))
}

// memoryMonitor is the node's memory monitor for a threshold of pct percent.
func memoryMonitor(pct float64) (*mempressure.Monitor, error) {
	return mempressure.New(mempressure.Config{Threshold: pct, OverrideFile: mempressure.OverrideFromEnvironment()})
}

// logMemoryMonitor says how the node measures memory pressure.
func logMemoryMonitor(log *slog.Logger, m *mempressure.Monitor) {
	if m == nil {
		return
	}
	if !m.HasPSI() {
		log.Info("this kernel has no memory PSI ("+mempressure.PSIPath+" is absent): memory pressure is measured on MemAvailable alone", "threshold_percent", m.Threshold())
	}
	if f := mempressure.OverrideFromEnvironment(); f != "" {
		log.Warn("TEST ONLY: the node reports the memory pressure written in "+mempressure.TestOverrideEnv, "file", f)
	}
}

// hostBridgeBinary checks the space-host-bridge binary flagValue names, by
// default the one beside this binary.
func hostBridgeBinary(flagValue string) (string, error) {
	if flagValue == "" {
		return hostbin.Find(hostbin.HostBridge)
	}
	path, err := filepath.Abs(flagValue)
	if err != nil {
		return "", err
	}
	return path, hostbin.Check(path)
}

func runNodeWith(ctx context.Context, o nodeOptions, log *slog.Logger) error {
	token, err := secretFile(filepath.Join(o.dataDir, "node.token"))
	if err != nil {
		return err
	}
	var si unix.Sysinfo_t
	memMiB := 1024
	if unix.Sysinfo(&si) == nil {
		memMiB = int(uint64(si.Totalram) * uint64(si.Unit) >> 20)
	}
	logMemoryMonitor(log, o.memory)
	var m *node.Manager
	if o.gateway != nil {
		// The gateway asks the control plane for the credentials it
		// injects, with the node's own credential from its heartbeats.
		o.gateway.Credentials = &node.CredentialClient{Server: o.server, NodeID: o.nodeID, Credential: func() string { return m.Credential() }}
	}
	m, err = node.NewManager(node.Config{
		BridgeReadyTimeout: 20 * time.Second,
		ExtraMetrics:       o.extraMetrics,
		NodeID:             o.nodeID, DataDir: o.dataDir, Privileged: o.pm, HostBridge: o.hostBridge, Token: token,
		CPUs: runtime.NumCPU(), MemoryMiB: memMiB * 3 / 4,
		Objects: o.objects, KMS: o.kms, Gateway: o.gateway, Memory: o.memory,
	}, log.With("component", "node"))
	if err != nil {
		return err
	}
	advertise := o.advertise
	if advertise == "" {
		advertise = o.listen
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return m.Serve(ctx, o.listen) })
	g.Go(func() error {
		m.RunPool(ctx)
		return nil
	})
	g.Go(func() error {
		m.RunFence(ctx)
		return nil
	})
	g.Go(func() error {
		m.LogOrphans(ctx)
		return nil
	})
	g.Go(func() error {
		return m.RunHeartbeats(ctx, node.HeartbeatConfig{Server: o.server, JoinToken: o.joinToken, Advertise: advertise})
	})
	return g.Wait()
}
