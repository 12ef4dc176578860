package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/spacesandbox/space/internal/capability"
	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/credentials/localstore"
	"github.com/spacesandbox/space/internal/e2bapi"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/hostbin"
	"github.com/spacesandbox/space/internal/kms"
	"github.com/spacesandbox/space/internal/kms/localkms"
	"github.com/spacesandbox/space/internal/mempressure"
	"github.com/spacesandbox/space/internal/node"
	"github.com/spacesandbox/space/internal/objstore"
	_ "github.com/spacesandbox/space/internal/objstore/filestore" // file:// object stores
	_ "github.com/spacesandbox/space/internal/objstore/s3store"   // s3:// object stores
	"github.com/spacesandbox/space/internal/pinnedproc"
	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/reconcile"
	"github.com/spacesandbox/space/internal/retention"
	"github.com/spacesandbox/space/internal/scheduler"
	"github.com/spacesandbox/space/internal/server"
	"github.com/spacesandbox/space/internal/store"
	"github.com/spacesandbox/space/internal/store/postgres"
	"github.com/spacesandbox/space/internal/store/readcache"
	"github.com/spacesandbox/space/internal/store/sqlite"
	"github.com/spacesandbox/space/internal/vmimage"
)

// builtinTemplates are the template sources the server knows by name.
var builtinTemplates = map[string]string{
	"minimal": "builtin:minimal",
	"base":    "builtin:base",
	// Jupyter kernels and the code interpreter's server (docs/e2b.md):
	// `space template build code-interpreter --from builtin:code-interpreter`.
	"code-interpreter": "builtin:code-interpreter",
}

// runServer is `space server [--dev]`.
func runServer(args []string) int {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	dev := fs.Bool("dev", false, "run the control plane, node services and node-manager in one command")
	listen := fs.String("listen", "127.0.0.1:7070", "address of the REST API")
	dataDir := fs.String("data-dir", "", "data directory (default $SPACE_DATA_DIR, /var/lib/space for root, else ~/.local/share/space)")
	database := fs.String("database", "", "database URL: sqlite://PATH, or postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=... to share one PostgreSQL database between replicas (default sqlite://DATA/space.db; see docs/scale-out.md)")
	objectStore := fs.String("object-store", "", "object store URL (default file://DATA/objects)")
	runtime := fs.String("default-runtime", "auto", "runtime used when a create names none: vm, ns, or auto (vm wherever a node offers it or is bringing it up; see --runtime-fallback)")
	fallback := fs.String("runtime-fallback", "", "with --default-runtime auto, the runtime of a create that names none when no node offers vm or is bringing it up: ns (recorded in the sandbox's events), or empty to refuse such a create")
	overcommit := fs.Float64("memory-overcommit", 1, "how many times a node's memory the sandboxes' memory limits on it may sum to (1: no overcommit; limits are caps and idle sandboxes use a fraction of them; above 1 a node must also keep its measured MemAvailable after the new sandbox's limit; a node under memory pressure takes none, see --memory-pressure-threshold)")
	cpuOvercommit := fs.Int("cpu-overcommit", scheduler.DefaultCPUOvercommit, "how many times a node's CPUs the sandboxes' CPUs on it may sum to (a sandbox's CPUs are a CFS quota, not a reservation; idle sandboxes use next to none)")
	memThreshold := addMemoryPressureFlag(fs, "--dev: ")
	maxTenantStreams := fs.Int("max-tenant-streams", server.DefaultMaxTenantStreams, "how many long-lived operations (exec sessions, file watches and transfers, E2B envd requests, TCP port tunnels, HTTP requests to exposed ports) one tenant may have open at this server at once across all its sandboxes; the next is refused 429 too_many_streams (each sandbox holds at most 256 of them)")
	warmupWait := fs.Duration("warmup-wait", server.DefaultWarmupWait, "how long a create waits for its template to finish building and its runtime to come up on a node")
	noBase := fs.Bool("no-base-template", false, "do not build the Debian `base` template at start (tests)")
	kernelBuild := fs.String("kernel-build", vmimage.KernelBuildBackground, "--dev: when the vm runtime's minimal kernel is not built, background (serve at once on Debian's cloud kernel, build it at low priority, move new VMs to it), wait (for a build another process runs) or off; see `space node-manager`")
	snapEvery := fs.Duration("snapshot-every", 10*time.Minute, "period of the disk snapshots of every running sandbox (0: none)")
	fullEvery := fs.Duration("full-snapshot-every", time.Hour, "period of the full (memory) snapshots of every running vm sandbox (0: none)")
	retain := fs.String("snapshot-retention", retention.DefaultPolicyString, "which scheduled snapshots to keep: EVERY:FOR tiers and max=N (newest of each EVERY bucket younger than FOR)")
	kmsDir := fs.String("kms-dir", "", "directory of the local-file KMS holding the tenants' keys (default DATA/kms)")
	defaultEgress := fs.String("default-egress", "", "JSON egress policy file for sandboxes created without one (default {\"allow_internet\": true}: the public internet only; see docs/network.md)")
	ingressDomain := fs.String("ingress-domain", server.DefaultIngressDomain, "domain of the host names that reach exposed sandbox ports on the API listener: {port}-{sandbox}.DOMAIN (see docs/ports.md)")
	nodeLostAfter := fs.Duration("node-lost-after", reconcile.DefaultNodeLostAfter, "how long a node may miss heartbeats before it is declared lost and its sandboxes recovered on other nodes from their snapshots in object storage, or failed (see docs/scale-out.md)")
	publicURL := fs.String("public-url", "", "the API's address as clients reach it, http(s)://HOST[:PORT] (behind a proxy or load balancer): the links the API hands out (E2B template upload urls) are built on it; default: each request's Host header")
	metricsTokenFile := fs.String("metrics-token-file", "", "file holding a bearer token that may read GET /metrics (a Prometheus scraper's); admin keys always may (see docs/authorization.md)")
	gwFlags := addGatewayFlags(fs)
	var denyCIDRs []netip.Prefix
	fs.Func("deny-cidr", "an address or CIDR of this deployment's own services that no sandbox may reach, whatever its policy, on any port (repeatable; the listeners, database, object store and nodes are denied already; see docs/network.md)", func(v string) error {
		p, err := egress.ParseInternalCIDR(v)
		if err == nil {
			denyCIDRs = append(denyCIDRs, p)
		}
		return err
	})
	var warmPools []server.WarmPool
	fs.Func("warm-pool", "keep prepared sandboxes on every node: TEMPLATE:RUNTIME[:CPUSxMEMORY_MIB]=SIZE, e.g. minimal:ns=8 (repeatable; see docs/PERFORMANCE.md)", func(v string) error {
		p, err := server.ParseWarmPool(v)
		if err == nil {
			warmPools = append(warmPools, p)
		}
		return err
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := validDomain(*ingressDomain); err != nil {
		fmt.Fprintf(os.Stderr, "space server: --ingress-domain %q: %v\n", *ingressDomain, err)
		return 2
	}
	if *publicURL != "" {
		u, err := e2bapi.ParsePublicURL(*publicURL)
		if err != nil {
			fmt.Fprintf(os.Stderr, "space server: --public-url: %v\n", err)
			return 2
		}
		*publicURL = u
	}
	log := newLogger()
	dir, err := resolveDataDir(*dataDir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space server: %v\n", err)
		return 1
	}
	if *dev {
		// --dev starts the node-manager and host bridges beside this
		// binary, and the node-manager uses the space-guest beside it:
		// refuse a missing one, or a guest no sandbox can run, before
		// serving anything.
		err := devBinaries()
		if err != nil {
			fmt.Fprintf(os.Stderr, "space server: %v\n", err)
			return 1
		}
	}
	if err := vmimage.ValidKernelBuild(*kernelBuild); err != nil {
		fmt.Fprintf(os.Stderr, "space server: %v\n", err)
		return 2
	}
	mem, err := memoryMonitor(*memThreshold)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space server: %v\n", err)
		return 2
	}
	if *nodeLostAfter < time.Second {
		fmt.Fprintf(os.Stderr, "space server: --node-lost-after %s: want at least 1s\n", *nodeLostAfter)
		return 2
	}
	if *runtime != "vm" && *runtime != "ns" && *runtime != "auto" {
		fmt.Fprintf(os.Stderr, "space server: --default-runtime %q: want vm, ns or auto\n", *runtime)
		return 2
	}
	if *fallback != "" && *fallback != "ns" {
		fmt.Fprintf(os.Stderr, "space server: --runtime-fallback %q: want ns, or nothing to refuse\n", *fallback)
		return 2
	}
	if *cpuOvercommit < 1 {
		fmt.Fprintf(os.Stderr, "space server: --cpu-overcommit %d: want at least 1 (1: the sandboxes' CPUs sum to at most the node's)\n", *cpuOvercommit)
		return 2
	}
	if *maxTenantStreams < 1 {
		fmt.Fprintf(os.Stderr, "space server: --max-tenant-streams %d: want at least 1 (default %d)\n", *maxTenantStreams, server.DefaultMaxTenantStreams)
		return 2
	}
	if *warmupWait <= 0 {
		fmt.Fprintf(os.Stderr, "space server: --warmup-wait %s: want more than 0\n", *warmupWait)
		return 2
	}
	if *dev && *runtime == "auto" {
		// --dev is the whole deployment: on a host that cannot run vm,
		// no node will ever offer it, and ns is the strongest isolation
		// the deployment has (not a downgrade).
		if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
			log.Info("default runtime ns: this host has no QEMU, so the vm runtime is not available (apt-get install qemu-system-x86 for vm)")
			*runtime = "ns"
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	gw, err := gwFlags.config()
	if err != nil {
		fmt.Fprintf(os.Stderr, "space server: %v\n", err)
		return 2
	}
	opts := serverOptions{gateway: gw, dev: *dev, listen: *listen, dataDir: dir, database: *database, defaultRuntime: *runtime, runtimeFallback: *fallback, memoryOvercommit: *overcommit, cpuOvercommit: *cpuOvercommit, warmupWait: *warmupWait, maxTenantStreams: *maxTenantStreams, buildBase: !*noBase, kernelBuild: *kernelBuild, memory: mem,
		objectStore: *objectStore, kmsDir: *kmsDir, ingressDomain: strings.ToLower(strings.TrimSuffix(*ingressDomain, ".")),
		schedule: retention.Schedule{DiskEvery: *snapEvery, FullEvery: *fullEvery}, warmPools: warmPools,
		nodeLostAfter: *nodeLostAfter, denyCIDRs: denyCIDRs, publicURL: *publicURL}
	if *metricsTokenFile != "" {
		if opts.metricsToken, err = readMetricsToken(*metricsTokenFile); err != nil {
			fmt.Fprintf(os.Stderr, "space server: --metrics-token-file: %v\n", err)
			return 2
		}
	}
	if opts.retention, err = retention.ParsePolicy(*retain); err != nil {
		fmt.Fprintf(os.Stderr, "space server: --snapshot-retention: %v\n", err)
		return 2
	}
	if *defaultEgress != "" {
		if opts.defaultEgress, err = readEgressPolicy(*defaultEgress); err != nil {
			fmt.Fprintf(os.Stderr, "space server: --default-egress: %v\n", err)
			return 2
		}
	}
	if err := serve(ctx, opts, log); err != nil {
		fmt.Fprintf(os.Stderr, "space server: %v\n", err)
		return 1
	}
	return 0
}

type serverOptions struct {
	// metricsToken, when set, reads GET /metrics without an API key.
	metricsToken string
	// nodeLostAfter is how long a node may be silent before it is lost.
	nodeLostAfter  time.Duration
	dev            bool
	listen         string
	dataDir        string
	database       string
	defaultRuntime string
	// runtimeFallback and warmupWait: server.Config's RuntimeFallback and
	// WarmupWait.
	runtimeFallback string
	warmupWait      time.Duration
	// maxTenantStreams is server.Config's MaxTenantStreams.
	maxTenantStreams int
	// memoryOvercommit is server.Config's MemoryOvercommit.
	memoryOvercommit float64
	// cpuOvercommit is server.Config's CPUOvercommit.
	cpuOvercommit int
	buildBase     bool
	kernelBuild   string               // --dev: the node-manager's --kernel-build
	memory        *mempressure.Monitor // --dev: the node's memory monitor
	// objectStore is the object store URL and kmsDir the local KMS's
	// directory; empty means DATA/objects and DATA/kms.
	objectStore string
	kmsDir      string
	// schedule and retention are the scheduled snapshots of running
	// sandboxes and which of them are kept.
	schedule  retention.Schedule
	retention retention.Policy
	// gateway is the --dev node's network gateway; nil: no sandbox network.
	gateway *node.GatewayConfig
	// defaultEgress is the egress policy of sandboxes created without one;
	// nil: the server's built-in default.
	defaultEgress *egress.Policy
	// ingressDomain is the domain of the ingress host names.
	ingressDomain string
	// publicURL is --public-url, checked ("": none).
	publicURL string
	// warmPools are the prepared executions nodes keep ready.
	warmPools []server.WarmPool
	// denyCIDRs are the --deny-cidr prefixes: internal services no
	// sandbox reaches.
	denyCIDRs []netip.Prefix
}

// validDomain checks a DNS domain name: dot-separated labels of letters,
// digits and inner hyphens, 1-63 bytes each, short enough that an ingress
// name ({port}-{sandbox}.) fits in 253 bytes.
func validDomain(d string) error {
	d = strings.TrimSuffix(d, ".")
	if d == "" || len(d) > 200 {
		return fmt.Errorf("want a domain name of 1-200 bytes")
	}
	for _, label := range strings.Split(d, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("label %q: want 1-63 letters, digits or inner hyphens", label)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return fmt.Errorf("label %q: want letters, digits or hyphens", label)
			}
		}
	}
	return nil
}

// readEgressPolicy reads and validates the JSON egress policy in path.
func readEgressPolicy(path string) (*egress.Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, egress.MaxPolicyBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	p, err := egress.ParsePolicy(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, nil
}

// storage opens the object store and the KMS of o.
func (o serverOptions) storage(ctx context.Context) (objstore.Store, *localkms.KMS, error) {
	url := o.objectStore
	if url == "" {
		url = "file://" + filepath.Join(o.dataDir, "objects")
	}
	objs, err := objstore.Open(ctx, url)
	if err != nil {
		return nil, nil, fmt.Errorf("object store: %w", err)
	}
	dir := o.kmsDir
	if dir == "" {
		dir = filepath.Join(o.dataDir, "kms")
	}
	k, err := localkms.Open(dir)
	if err != nil {
		objs.Close()
		return nil, nil, fmt.Errorf("kms: %w", err)
	}
	// Every use of a tenant key is audited first, and refused when the
	// audit log cannot be written (F-10). The file stays open for the
	// process's life; several processes may append to it.
	audit, err := localkms.OpenAuditFile(filepath.Join(o.dataDir, "kms-audit.log"))
	if err != nil {
		objs.Close()
		return nil, nil, fmt.Errorf("kms: %w", err)
	}
	k.SetAuditor(audit)
	return objs, k, nil
}

// tenantKey returns the tenant's newest active key, creating one on first
// use.
func tenantKey(k *localkms.KMS) func(ctx context.Context, tenant string) (string, error) {
	return func(ctx context.Context, tenant string) (string, error) {
		keys, err := k.Keys(ctx, tenant)
		if err != nil {
			return "", err
		}
		for i := len(keys) - 1; i >= 0; i-- {
			if keys[i].Active() {
				return keys[i].ID, nil
			}
		}
		return k.CreateKey(ctx, tenant)
	}
}

// resolveDataDir is the data directory --data-dir names (hostbin.DataDir).
func resolveDataDir(flagValue string) (string, error) { return hostbin.DataDir(flagValue) }

// openDatabase opens the store dbURL names: "" is the SQLite file
// DATA/space.db, sqlite://PATH another SQLite file, and postgres:// or
// postgresql:// a PostgreSQL database shared by every replica.
func openDatabase(ctx context.Context, dataDir, dbURL string) (store.Store, error) {
	if dbURL == "" {
		return openSQLite(ctx, filepath.Join(dataDir, "space.db"))
	}
	const want = "want sqlite://PATH or postgres://USER@HOST/DATABASE"
	u, err := url.Parse(dbURL)
	if err != nil {
		// Not err itself: it repeats the URL, password included.
		return nil, fmt.Errorf("database URL does not parse; %s", want)
	}
	switch u.Scheme {
	case "sqlite":
		return openSQLite(ctx, u.Host+u.Path)
	case "postgres", "postgresql":
		st, err := postgres.Open(ctx, dbURL)
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	return nil, fmt.Errorf("database %s: scheme %q: %s", u.Redacted(), u.Scheme, want)
}

// singleReplica reports whether the database dbURL names can have only this
// server on it: SQLite (the default) is a file one process owns.
func singleReplica(dbURL string) bool {
	return dbURL == "" || strings.HasPrefix(dbURL, "sqlite:")
}

// openSQLite opens the SQLite file at path behind the read cache of API keys
// and sandboxes (internal/store/readcache): this process is the file's only
// writer (it holds the file's lock, sqlitelock.go), so every write that
// changes a cached answer goes through the cache and drops it before it
// returns. PostgreSQL stores are never cached: another replica's revocation
// would not reach this one's cache.
func openSQLite(ctx context.Context, path string) (store.Store, error) {
	st, err := sqlite.Open(ctx, path) // first: it checks path
	if err != nil {
		return nil, err
	}
	lock, err := lockSQLite(ctx, path)
	if err != nil {
		st.Close()
		return nil, err
	}
	return cachedSQLite{Store: readcache.New(st, readcache.DefaultSize), lock: lock}, nil
}

func serve(ctx context.Context, o serverOptions, log *slog.Logger) error {
	st, err := openDatabase(ctx, o.dataDir, o.database)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer st.Close()
	keyFile := filepath.Join(o.dataDir, "admin.key")
	secret, err := server.Bootstrap(ctx, st, keyFile)
	if err != nil {
		return err
	}
	joinToken, err := secretFile(filepath.Join(o.dataDir, "join.token"))
	if err != nil {
		return err
	}
	keyring, err := capability.OpenKeyring(filepath.Join(o.dataDir, "signing-keys.json"), filepath.Join(o.dataDir, "signing.key"))
	if err != nil {
		return err
	}
	objs, keys, err := o.storage(ctx)
	if err != nil {
		return err
	}
	defer objs.Close()
	creds, err := openCredentials(o.dataDir)
	if err != nil {
		return err
	}
	defer creds.audit.Close()
	caSealer, err := server.OpenCASealer(filepath.Join(o.dataDir, "ca-seal.key"))
	if err != nil {
		return err
	}
	nodes := server.NewNodes()
	nodes.Share(st, caSealer)
	rec := reconcile.New(reconcile.Config{
		Objects: objs, TenantKey: tenantKey(keys), Schedule: o.schedule, Retention: o.retention,
		NodeLostAfter: o.nodeLostAfter, SingleReplica: singleReplica(o.database),
		Overcommit: scheduler.Overcommit{Ratio: o.memoryOvercommit, CPURatio: o.cpuOvercommit}, NodeMemory: nodes.NodeMemory,
	}, st, func(id string) (reconcile.NodeAPI, error) {
		return nodes.Client(id)
	}, log.With("component", "reconcile"))
	srv := server.New(server.Config{
		Listen: o.listen, JoinToken: joinToken, DefaultRuntime: o.defaultRuntime, RuntimeFallback: o.runtimeFallback, MemoryOvercommit: o.memoryOvercommit, CPUOvercommit: o.cpuOvercommit, WarmupWait: o.warmupWait, MaxTenantStreams: o.maxTenantStreams, Builtins: builtinTemplates,
		Keyring: keyring, KMS: keys, DefaultEgress: o.defaultEgress,
		Credentials: creds.manager, CredentialStore: creds.backend, CredentialAudit: creds.audit, CASealer: caSealer,
		IngressDomain: o.ingressDomain, WarmPools: o.warmPools, MetricsToken: o.metricsToken,
		E2BFilesDir: filepath.Join(o.dataDir, "e2b-template-files"), PublicURL: o.publicURL,
		Internal: server.InternalConfig{DenyCIDRs: o.denyCIDRs, Hosts: server.ServiceHosts(o.database, o.objectStore)},
	}, st, nodes, rec, log.With("component", "server"))

	g, ctx := errgroup.WithContext(ctx)
	ready := make(chan string, 1)
	g.Go(func() error { return srv.Run(ctx, func(addr string) { ready <- addr }) })
	g.Go(func() error { return rec.Run(ctx) })
	g.Go(func() error { return rec.FollowChanges(ctx) }) // PostgreSQL: other replicas' writes
	g.Go(func() error { return srv.RunTemplateBuilds(ctx) })
	var addr string
	select {
	case addr = <-ready:
	case <-ctx.Done():
		return g.Wait()
	}
	apiURL := "http://" + addr
	if o.dev {
		// Ready is said once the node-manager answers: a --dev server
		// whose node cannot start exits with the reason instead.
		nodeUp := make(chan struct{})
		g.Go(func() error {
			return runDevNode(ctx, o.dataDir, o.kernelBuild, apiURL, joinToken, objs, keys, o.gateway, o.memory, nodeUp, log)
		})
		select {
		case <-nodeUp:
		case <-ctx.Done():
			return g.Wait()
		}
	}
	if err := srv.EnsureTemplate(ctx, "minimal", builtinTemplates["minimal"]); err != nil {
		return err
	}
	if o.buildBase {
		if err := srv.EnsureTemplate(ctx, "base", builtinTemplates["base"]); err != nil {
			return err
		}
	}
	fmt.Printf("SPACE_API_URL=%s\n", apiURL)
	// The E2B SDKs reach the same listener (docs/e2b.md): the REST API under
	// its E2B path, the sandboxes' envd at the root. E2B_API_KEY is the API key.
	fmt.Printf("E2B_API_URL=%s%s\n", apiURL, server.E2BPathPrefix)
	fmt.Printf("E2B_SANDBOX_URL=%s\n", apiURL)
	if secret != "" {
		fmt.Printf("SPACE_API_KEY=%s\n", secret)
	} else {
		fmt.Printf("SPACE_API_KEY is in %s\n", keyFile)
	}
	log.Info("space server ready", "url", apiURL, "data_dir", o.dataDir, "dev", o.dev)
	err = g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// credentialStore is the control plane's credential manager and what it
// is made of.
type credentialStore struct {
	backend *localstore.Store
	audit   *credentials.FileAuditLog
	manager *credentials.Manager
}

// openCredentials opens the encrypted credential store DATA/credentials
// (its key DATA/credentials.key, made 0600 on first start) and the audit log
// DATA/credentials-audit.log.
func openCredentials(dataDir string) (*credentialStore, error) {
	keyPath := filepath.Join(dataDir, "credentials.key")
	if err := localstore.GenerateKeyFile(keyPath); err != nil && !errors.Is(err, errdefs.ErrConflict) {
		return nil, fmt.Errorf("credential store: %w", err)
	}
	backend, err := localstore.Open(filepath.Join(dataDir, "credentials"), keyPath)
	if err != nil {
		return nil, fmt.Errorf("credential store: %w", err)
	}
	audit, err := credentials.OpenFileAuditLog(filepath.Join(dataDir, "credentials-audit.log"))
	if err != nil {
		return nil, fmt.Errorf("credential audit log: %w", err)
	}
	return &credentialStore{backend: backend, audit: audit, manager: credentials.NewManager(backend, audit)}, nil
}

// secretFile returns the secret stored in path, creating it on first use.
// readMetricsToken reads the scrape token of GET /metrics from path.
func readMetricsToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if err := server.ValidMetricsToken(tok); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return tok, nil
}

func secretFile(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	}
	buf := make([]byte, 32)
	rand.Read(buf)
	tok := hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return tok, nil
}

// devBinaries checks the binaries `space server --dev` runs beside this
// one.
func devBinaries() error {
	for _, name := range []string{hostbin.NodeManager, hostbin.HostBridge} {
		if _, err := hostbin.Find(name); err != nil {
			return err
		}
	}
	guest, err := defaultGuestBinary()
	if err != nil {
		return err
	}
	return checkGuestBinary(guest)
}

// runDevNode runs this machine's node services beside the control plane: the
// root node-manager as a child process (it dies with this process; the
// sandboxes it started do not), started again when it exits after it
// started (nmSupervisor), and the sandbox manager in this process.
func runDevNode(ctx context.Context, dataDir, kernelBuild, apiURL, joinToken string, objs objstore.Store, keys kms.KMS, gw *node.GatewayConfig, mem *mempressure.Monitor, up chan<- struct{}, log *slog.Logger) error {
	nodeManager, err := hostbin.Find(hostbin.NodeManager)
	if err != nil {
		return err
	}
	hostBridge, err := hostbin.Find(hostbin.HostBridge)
	if err != nil {
		return err
	}
	runDir := filepath.Join(dataDir, "run")
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return err
	}
	pmSocket := filepath.Join(runDir, "node-manager.sock")
	if os.Geteuid() != 0 {
		return fmt.Errorf("--dev starts the root node-manager itself: run as root, or start `sudo space node-manager --data-dir %s` and `space node` separately", dataDir)
	}
	pm := privop.NewClient(pmSocket)
	sup := newNMSupervisor(func(restart bool) (*pinnedproc.Child, error) {
		cmd := exec.Command(nodeManager, "--data-dir", dataDir, "--socket", pmSocket, "--kernel-build", kernelBuild)
		if restart {
			cmd.Env = withoutFailpoints(os.Environ())
		}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
		// Forked from a pinned thread: this process ends threads (the ns
		// driver's), and the parent-death signal follows the thread.
		return pinnedproc.Start(cmd)
	}, func(ctx context.Context, exited <-chan struct{}, why func() error) error {
		return waitNodeManager(ctx, pm, exited, why)
	}, log.With("component", "node-manager-supervisor"))
	// The supervisor outlives the node: it stops the node-manager once the
	// node has ended (the node's last calls still reach it), or ends the
	// node when it gives up.
	supCtx, stopSup := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSup()
	nmUp, supDone := make(chan struct{}), make(chan error, 1)
	go func() { supDone <- sup.Run(supCtx, ctx.Done(), nmUp) }()
	select {
	case <-nmUp:
	case err := <-supDone:
		return err
	case <-ctx.Done():
		stopSup()
		<-supDone
		return ctx.Err()
	}
	close(up)
	nodeCtx, stopNode := context.WithCancel(ctx)
	defer stopNode()
	nodeDone := make(chan error, 1)
	go func() {
		nodeDone <- runNodeWith(nodeCtx, nodeOptions{
			dataDir: dataDir, nodeID: "local", server: apiURL, joinToken: joinToken,
			listen: "unix:" + filepath.Join(runDir, "node.sock"), pm: pm, objects: objs, kms: keys, gateway: gw,
			hostBridge: hostBridge, memory: mem, extraMetrics: sup.writeMetrics,
		}, log)
	}()
	select {
	case err := <-nodeDone:
		stopSup()
		<-supDone
		return err
	case err := <-supDone:
		stopNode()
		<-nodeDone
		return err
	}
}

// waitNodeManager waits until the node-manager answers, has exited (closed
// exited; why() then says how), or ctx ends.
func waitNodeManager(ctx context.Context, pm *privop.Client, exited <-chan struct{}, why func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := pm.Hello(hctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the node-manager exited at start (%v): its error is above", why())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node-manager did not answer: %w", err)
		}
	}
}
