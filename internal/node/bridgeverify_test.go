package node

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/bridge"
	"github.com/spacesandbox/space/internal/driver"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/guestd"
	"github.com/spacesandbox/space/internal/privop"
	"github.com/spacesandbox/space/internal/unixsock"
)

// TestMain lets the test binary be the space-host-bridge the manager
// spawns (Config.HostBridge is the test binary itself; the manager passes
// --exec-id first), so the tests below run real bridge processes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "--exec-id" {
		os.Exit(testHostBridge(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// testHostBridge is cmd/space-host-bridge's runHostBridge, flag for flag.
func testHostBridge(args []string) int {
	fs := flag.NewFlagSet("host-bridge", flag.ContinueOnError)
	execID := fs.String("exec-id", "", "")
	socket := fs.String("socket", "", "")
	exitFile := fs.String("exit-file", "", "")
	errorsFile := fs.String("errors-file", "", "")
	guestFD := fs.Int("guest-fd", 3, "")
	guestPid := fs.Int("guest-pid", 0, "")
	guestStart := fs.Uint64("guest-start-time", 0, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "host-bridge")
	conn, err := bridge.OpenChannel(*guestFD)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space host-bridge: %v\n", err)
		return 1
	}
	cfg := bridge.Config{ExecID: *execID, Socket: *socket, Channel: conn, ExitFile: *exitFile, ErrorsFile: *errorsFile}
	if *guestPid != 0 {
		cfg.Guest = &bridge.Process{Pid: *guestPid, StartTime: *guestStart}
	}
	b, err := bridge.New(cfg, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "space host-bridge: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := b.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "space host-bridge: %v\n", err)
		return 1
	}
	return 0
}

// syncBuffer is a log sink written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// bridgeTestManager is a manager whose host bridge is this test binary.
func bridgeTestManager(t *testing.T) (*Manager, *syncBuffer) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	m, err := NewManager(Config{NodeID: "node-a", DataDir: t.TempDir(), Privileged: privop.NewClient("/nonexistent"), HostBridge: exe},
		slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	agreeClock(t, m)
	return m, logs
}

// serveGuest runs a real guest daemon on conn until the test ends.
func serveGuest(t *testing.T, conn net.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = guestd.Serve(ctx, conn, guestd.Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	t.Cleanup(func() {
		cancel()
		conn.Close()
		<-done
	})
}

// nsChannel is a guest channel as the ns runtime makes it: a socketpair, the
// guest daemon on the other end.
func nsChannel(t *testing.T) *os.File {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	gf := os.NewFile(uintptr(fds[1]), "guest")
	guestConn, err := net.FileConn(gf)
	gf.Close()
	if err != nil {
		t.Fatal(err)
	}
	serveGuest(t, guestConn)
	return os.NewFile(uintptr(fds[0]), "host")
}

// vmChannel is a guest channel as the vm runtime makes it: a connection to a
// socket the "VMM" listens on — this test process, whose pid is therefore
// what SO_PEERCRED names — with the guest daemon on the accepted end.
func vmChannel(t *testing.T) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "channel.sock")
	ln, err := unixsock.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := unixsock.Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := <-accepted
	if !ok {
		t.Fatal("accept on the channel socket failed")
	}
	serveGuest(t, g)
	f, err := c.(*net.UnixConn).File()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// spawnTestBridge spawns a real host bridge for a new execution over channel
// and saves its record. The bridge is killed when the test ends.
func spawnTestBridge(t *testing.T, m *Manager, rec *Record, channel *os.File) {
	t.Helper()
	if err := os.MkdirAll(m.records.execDir(rec.ExecID), 0o700); err != nil {
		t.Fatal(err)
	}
	err := m.spawnBridge(rec, channel)
	channel.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killIfSame(rec.BridgePid, rec.BridgeStartTime) })
	if err := m.records.save(rec); err != nil {
		t.Fatal(err)
	}
}

func readyBridge(t *testing.T, m *Manager, rec *Record) *bridgeConn {
	t.Helper()
	bc, err := m.bridge(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := bc.waitReady(context.Background(), 30*time.Second); err != nil {
		t.Fatalf("bridge of %s: %v%s", rec.ExecID, err, m.bridgeLogTail(rec.ExecID))
	}
	return bc
}

func nsRecord(id string) *Record {
	return &Record{StartExecution: nodev1.StartExecution{ExecID: id, SandboxID: "sb1", Generation: 1, ActivationID: "a-1", Runtime: "ns"}}
}

// TestSpawnedBridgeIsVerified: the record holds the bridge's pid, start time
// and executable, and a connection to the real bridge passes every check.
func TestSpawnedBridgeIsVerified(t *testing.T) {
	testenvSkipWithoutProc(t)
	m, _ := bridgeTestManager(t)
	rec := nsRecord("sb1-g1-ok")
	spawnTestBridge(t, m, rec, nsChannel(t))
	readyBridge(t, m, rec)

	var st unix.Stat_t
	if err := unix.Stat(m.cfg.HostBridge, &st); err != nil {
		t.Fatal(err)
	}
	if rec.BridgeExeDev != st.Dev || rec.BridgeExeIno != st.Ino {
		t.Errorf("recorded executable %d:%d, want %s = %d:%d", rec.BridgeExeDev, rec.BridgeExeIno, m.cfg.HostBridge, st.Dev, st.Ino)
	}
	saved, err := m.records.load(rec.ExecID)
	if err != nil || saved.BridgeExeIno != rec.BridgeExeIno || saved.BridgeExeDev != rec.BridgeExeDev {
		t.Errorf("saved record executable = %+v, %v", saved, err)
	}
}

// TestImpostorOnBridgeSocketIsRefused: a process that is not the spawned
// bridge serving the bridge's socket path is refused on connection, counted
// and logged with both identities; it is never believed.
func TestImpostorOnBridgeSocketIsRefused(t *testing.T) {
	testenvSkipWithoutProc(t)
	m, logs := bridgeTestManager(t)
	rec := nsRecord("sb1-g1-imp")
	spawnTestBridge(t, m, rec, nsChannel(t))
	bc := readyBridge(t, m, rec)

	// Take over the socket path: this test process now answers there, and
	// would say the guest is ready.
	bc.close()
	sock := m.records.socket(rec.ExecID)
	if err := os.Remove(sock); err != nil {
		t.Fatal(err)
	}
	ln, err := unixsock.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, bridge.Status{ExecID: rec.ExecID, Ready: true})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	before := m.refusals.bridgePeer.Value(peerCheckPid)
	_, err = bc.status(context.Background())
	var r *peerRefusedError
	if !errors.As(err, &r) || r.check != peerCheckPid || !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("status through an impostor = %v, want a pid refusal", err)
	}
	if r.got.pid != os.Getpid() || r.want.pid != rec.BridgePid {
		t.Errorf("refusal names peer %d and bridge %d, want %d and %d", r.got.pid, r.want.pid, os.Getpid(), rec.BridgePid)
	}
	if got := m.refusals.bridgePeer.Value(peerCheckPid) - before; got != 1 {
		t.Errorf("pid refusals counted: %d, want 1", got)
	}
	line := logLine(logs.String(), "host bridge connection refused")
	for _, want := range []string{fmt.Sprintf("peer.pid=%d", os.Getpid()), fmt.Sprintf("bridge.pid=%d", rec.BridgePid), "check=pid"} {
		if !strings.Contains(line, want) {
			t.Errorf("refusal log %q lacks %q", line, want)
		}
	}
	// The observed state says the bridge cannot be reached, not ready.
	if ex := m.observe(context.Background(), rec); ex.State != nodev1.ExecFailed || !strings.Contains(ex.Reason, "refused") {
		t.Errorf("observed %s %q, want failed because refused", ex.State, ex.Reason)
	}
}

// TestReusedBridgePidIsRefused: the record's pid now belongs to another
// process (here: another real bridge) that serves a socket at the path; its
// start time gives it away.
func TestReusedBridgePidIsRefused(t *testing.T) {
	testenvSkipWithoutProc(t)
	m, _ := bridgeTestManager(t)
	other := nsRecord("sb2-g1-other")
	spawnTestBridge(t, m, other, nsChannel(t))
	readyBridge(t, m, other)

	// A record of an earlier bridge that had the same pid.
	stale := *other
	stale.BridgeStartTime--
	bc := dialBridge(&stale, m.records.socket(other.ExecID), nil, m.refusals.bridgePeer)
	defer bc.close()
	before := m.refusals.bridgePeer.Value(peerCheckStart)
	_, err := bc.status(context.Background())
	var r *peerRefusedError
	if !errors.As(err, &r) || r.check != peerCheckStart {
		t.Fatalf("status with a reused pid = %v, want a start-time refusal", err)
	}
	if got := m.refusals.bridgePeer.Value(peerCheckStart) - before; got != 1 {
		t.Errorf("start-time refusals counted: %d, want 1", got)
	}
}

// TestBridgeExecutableChecked: a record whose executable is not the one the
// bridge process runs is refused; a record from before the check (no
// executable) still works, with one log line saying the check is skipped.
func TestBridgeExecutableChecked(t *testing.T) {
	testenvSkipWithoutProc(t)
	m, logs := bridgeTestManager(t)
	rec := nsRecord("sb1-g1-exe")
	spawnTestBridge(t, m, rec, nsChannel(t))
	readyBridge(t, m, rec)
	sock := m.records.socket(rec.ExecID)

	wrong := *rec
	wrong.BridgeExeIno++
	bc := dialBridge(&wrong, sock, m.log, m.refusals.bridgePeer)
	defer bc.close()
	before := m.refusals.bridgePeer.Value(peerCheckExe)
	_, err := bc.status(context.Background())
	var r *peerRefusedError
	if !errors.As(err, &r) || r.check != peerCheckExe {
		t.Fatalf("status with another executable recorded = %v, want an exe refusal", err)
	}
	if got := m.refusals.bridgePeer.Value(peerCheckExe) - before; got != 1 {
		t.Errorf("exe refusals counted: %d, want 1", got)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("exe %d:%d", rec.BridgeExeDev, rec.BridgeExeIno)) {
		t.Errorf("refusal %q does not name the executable the peer runs", err)
	}

	// A record written by an older node: no executable fields.
	old := loadOldRecord(t, m, rec)
	if old.BridgeExeIno != 0 || old.BridgeExeDev != 0 {
		t.Fatalf("old record has executable %d:%d", old.BridgeExeDev, old.BridgeExeIno)
	}
	bc = dialBridge(old, sock, m.log, m.refusals.bridgePeer)
	defer bc.close()
	for range 2 {
		bc.close() // a new connection each time
		if _, err := bc.status(context.Background()); err != nil {
			t.Fatalf("old record: %v", err)
		}
	}
	if n := strings.Count(logs.String(), "predates the host bridge executable check"); n != 1 {
		t.Errorf("skip logged %d times, want once", n)
	}
}

// loadOldRecord writes testdata/record-v1.json (a record as nodes wrote
// them before the executable check) with rec's bridge pid and start time,
// and loads it.
func loadOldRecord(t *testing.T, m *Manager, rec *Record) *Record {
	t.Helper()
	tmpl, err := os.ReadFile("testdata/record-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	const id = "sb1-g1-old"
	b := strings.NewReplacer("@PID@", fmt.Sprint(rec.BridgePid), "@START@", fmt.Sprint(rec.BridgeStartTime), "@EXEC@", id).Replace(string(tmpl))
	if err := os.MkdirAll(m.records.execDir(id), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.records.execDir(id), "record.json"), []byte(b), 0o600); err != nil {
		t.Fatal(err)
	}
	old, err := m.records.load(id)
	if err != nil {
		t.Fatal(err)
	}
	return old
}

// TestBridgeRefusesGuestChannelOfAnotherProcess: a vm execution's bridge is
// told the VMM; given a channel whose peer is another process, the real
// bridge process refuses to serve, writes why to its exit file and exits, and
// the node's wait for it ends at once with that reason. With the right VMM
// the same bridge serves.
func TestBridgeRefusesGuestChannelOfAnotherProcess(t *testing.T) {
	testenvSkipWithoutProc(t)
	m, _ := bridgeTestManager(t)
	self, err := driver.ProcStartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}

	ok := nsRecord("sb1-g1-vm")
	ok.Runtime, ok.SandboxPid, ok.SandboxStartTime = "vm", os.Getpid(), self
	spawnTestBridge(t, m, ok, vmChannel(t))
	readyBridge(t, m, ok)

	// The VMM the record names is another process than the channel's peer.
	sleeper := exec.Command("sleep", "300")
	if err := sleeper.Start(); err != nil {
		t.Skipf("no sleep binary: %v", err)
	}
	t.Cleanup(func() { sleeper.Process.Kill(); sleeper.Wait() })
	sleeperStart, err := driver.ProcStartTime(sleeper.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		pid        int
		start      uint64
		wantReason string
	}{
		{"another process", sleeper.Process.Pid, sleeperStart, fmt.Sprintf("not the VMM pid %d", sleeper.Process.Pid)},
		{"reused pid", os.Getpid(), self + 1, "the pid was reused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := nsRecord("sb1-g1-" + strings.ReplaceAll(tc.name, " ", ""))
			rec.Runtime, rec.SandboxPid, rec.SandboxStartTime = "vm", tc.pid, tc.start
			spawnTestBridge(t, m, rec, vmChannel(t))
			bc, _ := m.bridge(rec)
			err := bc.waitReady(context.Background(), time.Minute)
			if err == nil || !strings.Contains(err.Error(), "exited before it served") {
				t.Fatalf("waitReady = %v, want the bridge gone", err)
			}
			exit, _ := os.ReadFile(m.records.exitFile(rec.ExecID))
			for _, want := range []string{"guest channel refused", tc.wantReason} {
				if !strings.Contains(string(exit), want) {
					t.Errorf("exit file %q lacks %q", exit, want)
				}
			}
			if !strings.Contains(m.bridgeLogTail(rec.ExecID), "guest channel refused") {
				t.Errorf("bridge log tail %q does not say why", m.bridgeLogTail(rec.ExecID))
			}
			if reason := m.failureReason(rec, err); !strings.Contains(reason, "guest channel refused") {
				t.Errorf("failure reason %q does not say why", reason)
			}
		})
	}
}

// logLine returns the first log line containing msg.
func logLine(logs, msg string) string {
	for l := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(l, msg) {
			return l
		}
	}
	return ""
}

func testenvSkipWithoutProc(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("needs /proc: %v", err)
	}
}

// TestBridgeIdentityOfAnExitedBridge: a bridge that exits before the node
// reads its identity (it refused its guest channel at once) is not an error
// of its own — the node's wait for it reports why it went — and gets an
// executable identity no process has; a live one gets its real one.
// (TestBridgeRefusesGuestChannelOfAnotherProcess failed once under load
// with "executable of pid …: no such file or directory".)
func TestBridgeIdentityOfAnExitedBridge(t *testing.T) {
	testenvSkipWithoutProc(t)
	gone := exec.Command("true")
	if err := gone.Start(); err != nil {
		t.Skipf("no true binary: %v", err)
	}
	defer gone.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", gone.Process.Pid))
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process never exited")
		}
		time.Sleep(time.Millisecond)
	}
	start, _, ino, err := bridgeIdentity(gone.Process.Pid)
	if err != nil || start == 0 || ino != exitedBridgeIno {
		t.Errorf("identity of an exited bridge: start %d, inode %d, %v; want its start time and exitedBridgeIno", start, ino, err)
	}

	live := exec.Command("sleep", "30")
	if err := live.Start(); err != nil {
		t.Skipf("no sleep binary: %v", err)
	}
	defer func() { live.Process.Kill(); live.Wait() }()
	_, dev, ino, err := bridgeIdentity(live.Process.Pid)
	wantDev, wantIno, werr := exeIdentity(live.Process.Pid)
	if err != nil || werr != nil || dev != wantDev || ino != wantIno || ino == exitedBridgeIno {
		t.Errorf("identity of a live bridge: %d/%d, %v; want its executable %d/%d (%v)", dev, ino, err, wantDev, wantIno, werr)
	}
}
