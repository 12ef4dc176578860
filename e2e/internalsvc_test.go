package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/objstore/s3store/s3test"
)

// Addresses of the deployment's own services in the egress namespace:
// public-looking (egress/reserved.go denies none of them), reachable from
// the host too, through a veth pair, so that the control plane uses the
// object store there.
const (
	upObjects = "20.0.0.40" // the S3 object store (versitygw), also serving HTTP on 80
	upDenyDst = "20.0.0.41" // named by --deny-cidr
)

// TestInternalServicesUnreachable: under allow_internet, with an allow CIDR
// naming them, a sandbox reaches neither the object store the control plane
// really uses (its S3 port nor another port of that host) nor an address of
// --deny-cidr, and a scan of common service ports finds none of them open,
// while equivalent listeners off the list answer.
func TestInternalServicesUnreachable(t *testing.T) { testInternalServices(t, "ns") }

// TestInternalServicesUnreachableVM: the same from a microVM.
func TestInternalServicesUnreachableVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("QEMU is not installed (make test installs qemu-system-x86)")
	}
	testInternalServices(t, "vm")
}

func testInternalServices(t *testing.T, runtime string) {
	e := newEgressNet(t)
	e.linkToHost()
	for _, a := range []string{upObjects, upDenyDst} {
		e.ip("-n", e.name, "addr", "add", a+"/32", "dev", "lo")
		e.serveHTTP(a)
	}
	// Common service ports on the internal addresses and, as the
	// control, on an address off the list.
	accepts := map[string]*atomic.Int64{}
	for _, a := range []string{upObjects, upDenyDst, upRaw} {
		for _, p := range scanPorts {
			accepts[a+":"+p] = e.acceptAndClose(a + ":" + p)
		}
	}
	s3 := e.startS3(upObjects)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	flags := append(e.serverFlags(),
		"--object-store", "s3://"+s3test.Bucket+"?endpoint="+s3.Endpoint+"&insecure=1",
		"--deny-cidr", upDenyDst+"/32")
	in := startServerWith(t, t.TempDir(), flags...)
	sb := in.createWithEgress(runtime, map[string]any{"allow_internet": true,
		"allow": map[string]any{"cidrs": []string{upObjects + "/32", upDenyDst + "/32"}}})

	// The control: an address off the list is reached.
	if r := in.httpGet(sb.ID, upRaw+":80", upRaw); !strings.Contains(r.Stdout, "upstream "+upRaw) {
		t.Fatalf("control: %s off the list is not reachable: %+v\n%s", upRaw, r, in.logs())
	}
	_, s3Port, _ := net.SplitHostPort(s3.Endpoint)
	for _, dst := range []string{upObjects + ":" + s3Port, upObjects + ":80", upDenyDst + ":80"} {
		if r := in.httpGet(sb.ID, dst, "x"); strings.Contains(r.Stdout, "HTTP/1.1") {
			t.Errorf("the sandbox reached the internal service %s: %+v", dst, r)
		}
	}
	for _, a := range []string{upObjects, upDenyDst} {
		if n := e.hits[a].Load(); n != 0 {
			t.Errorf("the internal service %s got %d requests from the sandbox", a, n)
		}
	}
	e.scanFromSandbox(in, sb.ID)
	for dst, n := range accepts {
		if !strings.HasPrefix(dst, upRaw+":") && n.Load() != 0 {
			t.Errorf("the internal service %s accepted %d connections from the sandbox", dst, n.Load())
		}
	}
	if !strings.Contains(in.logs(), "internal_service") {
		t.Errorf("no internal_service refusal in the node's log:\n%s", in.logs())
	}
}

// scanPorts are the ports scanFromSandbox tries: SSH, HTTPS, etcd,
// PostgreSQL, Redis, SPACE's API and node API, HTTP alternates, MinIO.
var scanPorts = []string{"22", "443", "2379", "5432", "6379", "7070", "7071", "8080", "9000"}

// scanFromSandbox connects from the sandbox to every scanPorts port of the
// internal addresses and of upRaw (the control): only upRaw's must answer.
func (e *egressNet) scanFromSandbox(in *instance, id string) {
	t := e.t
	var line strings.Builder
	for _, a := range []string{upObjects, upDenyDst, upRaw} {
		for _, p := range scanPorts {
			fmt.Fprintf(&line, "(nc -w 2 %s %s </dev/null >/dev/null 2>&1 && echo open %s:%s) & ", a, p, a, p)
		}
	}
	line.WriteString("wait")
	r := in.sh(id, line.String())
	var open []string
	for _, l := range strings.Split(r.Stdout, "\n") {
		if dst, ok := strings.CutPrefix(strings.TrimSpace(l), "open "); ok {
			open = append(open, dst)
		}
	}
	for _, p := range scanPorts {
		if !slices.Contains(open, upRaw+":"+p) {
			t.Errorf("control: the scan did not find %s:%s open (open: %q)", upRaw, p, open)
		}
	}
	for _, dst := range open {
		if !strings.HasPrefix(dst, upRaw+":") {
			t.Errorf("the scan from the sandbox found the internal service %s open", dst)
		}
	}
}

// countAccepts accepts and closes ln's connections, counting each in n,
// until ln is closed.
func countAccepts(ln net.Listener, n *atomic.Int64) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.Add(1)
		c.Close()
	}
}

// acceptAndClose listens on addr in the namespace and counts the
// connections it accepts, closing each.
func (e *egressNet) acceptAndClose(addr string) *atomic.Int64 {
	ln := e.listen(func() (any, error) { return net.Listen("tcp", addr) }).(net.Listener)
	e.t.Cleanup(func() { ln.Close() })
	n := &atomic.Int64{}
	go countAccepts(ln, n)
	return n
}

// linkToHost joins the egress namespace to the host with a veth pair, and
// routes 20.0.0.40/31 (upObjects, upDenyDst) from the host through it.
func (e *egressNet) linkToHost() {
	var b [3]byte
	rand.Read(b[:])
	host, peer := "spcih"+hex.EncodeToString(b[:]), "spcip"+hex.EncodeToString(b[:])
	subnet := fmt.Sprintf("10.%d.%d.", 200+int(b[0])%50, b[1])
	e.ip("link", "add", host, "type", "veth", "peer", "name", peer)
	e.t.Cleanup(func() { exec.Command("ip", "link", "del", host).Run() })
	e.ip("link", "set", peer, "netns", e.name)
	e.ip("addr", "add", subnet+"1/30", "dev", host)
	e.ip("link", "set", host, "up")
	e.ip("-n", e.name, "addr", "add", subnet+"2/30", "dev", peer)
	e.ip("-n", e.name, "link", "set", peer, "up")
	e.ip("route", "add", "20.0.0.40/31", "via", subnet+"2")
}

// s3Server is a versitygw running in the egress namespace.
type s3Server struct {
	Endpoint, AccessKey, SecretKey string
}

// startS3 runs versitygw in the egress namespace on addr and creates
// s3test.Bucket in it.
func (e *egressNet) startS3(addr string) *s3Server {
	t := e.t
	bin := s3test.Binary(t)
	ln := e.listen(func() (any, error) { return net.Listen("tcp", addr+":0") }).(net.Listener)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	s := &s3Server{Endpoint: net.JoinHostPort(addr, port), AccessKey: "SPACE" + strings.ToUpper(hex.EncodeToString([]byte(e.name))[:8]), SecretKey: e.name + "-secret"}
	cmd := exec.Command("ip", "netns", "exec", e.name, bin, "--port", s.Endpoint, "--quiet", "posix", root)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
	var out lockedBuf
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-done })
	// Create the bucket from the host, through the veth: the control
	// plane's own path to it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Endpoint+"/", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-done:
			t.Fatalf("versitygw exited: %s", out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw on %s did not answer from the host: %v\n%s", s.Endpoint, err, out.String())
		}
	}
	(&s3test.Server{Endpoint: s.Endpoint, AccessKey: s.AccessKey, SecretKey: s.SecretKey}).NewBucket(t, s3test.Bucket)
	return s
}

// lockedBuf is a bytes.Buffer safe for a process's two output streams.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
