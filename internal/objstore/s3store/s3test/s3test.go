// Package s3test starts a real S3-compatible server for tests: versitygw
// (github.com/versity/versitygw) with its POSIX backend on a temporary
// directory, listening on 127.0.0.1 with a random key pair, one process per
// Start, killed (with its process group) and removed when the test ends.
//
// The binary is built by `make s3server` into the test cache directory and
// found through SPACE_TEST_S3_SERVER (set by `make test`) or at
// $SPACE_TEST_CACHE_DIR/versitygw-<Version>/versitygw. When it is missing the
// test fails rather than skips: `make test` always builds it, so a missing
// binary is a broken setup, and a silent skip would hide the S3 driver's
// tests. SPACE_TEST_S3_SERVER=skip turns the S3 tests off on purpose.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/spacesandbox/space/internal/pinnedproc"
)

// Version is the versitygw release the Makefile builds.
const Version = "v1.8.0"

// EnvServer names the versitygw binary, or says "skip".
const EnvServer = "SPACE_TEST_S3_SERVER"

// Bucket is the bucket Start creates.
const Bucket = "space-test"

// startTimeout bounds the wait for a started server to answer.
const startTimeout = 30 * time.Second

// Server is a running versitygw.
type Server struct {
	// Endpoint is host:port of the server (plain HTTP).
	Endpoint string
	// AccessKey and SecretKey are the root user's random credentials.
	AccessKey, SecretKey string
	// Bucket exists and is empty when Start returns.
	Bucket string
	// Dir is the POSIX backend's directory: buckets are its subdirectories.
	Dir string

	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	log  *lockedBuffer
}

// Binary returns the path of the versitygw binary, skipping the test when
// SPACE_TEST_S3_SERVER=skip and failing it when the binary is missing.
func Binary(t testing.TB) string {
	t.Helper()
	switch env := os.Getenv(EnvServer); env {
	case "skip":
		t.Skipf("%s=skip: the tests against a real S3 server are disabled on purpose", EnvServer)
	case "":
	default:
		if err := executable(env); err != nil {
			t.Fatalf("%s=%s: %v (build it with `make s3server`, or set %s=skip to disable the S3 tests on purpose)", EnvServer, env, err, EnvServer)
		}
		return env
	}
	var tried []string
	for _, dir := range []string{os.Getenv("SPACE_TEST_CACHE_DIR"), "/var/cache/space"} {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "versitygw-"+Version, "versitygw")
		if executable(p) == nil {
			return p
		}
		tried = append(tried, p)
	}
	t.Fatalf("no versitygw binary (the real S3 server these tests run against) at %s: run `make s3server`, "+
		"set %s to its path, or set %s=skip to disable these tests on purpose", strings.Join(tried, " or "), EnvServer, EnvServer)
	return ""
}

func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// Start runs a versitygw and creates Bucket in it. The server is killed and
// its directory removed when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := Binary(t)
	var lastErr error
	for range 3 { // another process may take the free port first
		s, err := start(t, bin)
		if err == nil {
			return s
		}
		lastErr = err
	}
	t.Fatalf("start versitygw: %v", lastErr)
	return nil
}

func start(t testing.TB, bin string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir := t.TempDir()
	s := &Server{
		Endpoint:  net.JoinHostPort("127.0.0.1", port),
		AccessKey: "SPACE" + strings.ToUpper(randomHex(8)),
		SecretKey: randomHex(20),
		Bucket:    Bucket,
		Dir:       filepath.Join(dir, "root"),
		done:      make(chan struct{}),
		log:       &lockedBuffer{},
	}
	if err := os.Mkdir(s.Dir, 0o700); err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, "--port", s.Endpoint, "--quiet", "posix", s.Dir)
	s.cmd.Dir = dir
	// The keys go through the environment, not argv, which others can read.
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+s.AccessKey, "ROOT_SECRET_ACCESS_KEY="+s.SecretKey)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Pinned: the parent-death signal follows the thread that forked, and
	// tests end threads they moved into another namespace.
	child, err := pinnedproc.Start(s.cmd)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	go func() { child.Wait(); close(s.done) }()
	t.Cleanup(s.Kill)
	if err := s.waitReady(); err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

// waitReady waits until the server answers, then creates the bucket.
func (s *Server) waitReady() error {
	c, err := s.Client()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = c.MakeBucket(ctx, s.Bucket, minio.MakeBucketOptions{})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("versitygw exited: %v; its output:\n%s", s.cmd.ProcessState, s.log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not answer within %s: %v; its output:\n%s", startTimeout, err, s.log.String())
		}
	}
}

// Client returns a minio-go client of the server with the root user's keys.
func (s *Server) Client() (*minio.Client, error) {
	return minio.New(s.Endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:     "us-east-1",
		MaxRetries: 1,
	})
}

// NewBucket creates another bucket.
func (s *Server) NewBucket(t testing.TB, name string) {
	t.Helper()
	c, err := s.Client()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MakeBucket(t.Context(), name, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
}

// Kill kills the server's process group with SIGKILL and waits for it.
func (s *Server) Kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// Signal sends sig to the server's process group (SIGSTOP makes a server
// that accepts connections but never answers).
func (s *Server) Signal(sig syscall.Signal) error {
	return syscall.Kill(-s.cmd.Process.Pid, sig)
}

// Output is what the server printed so far.
func (s *Server) Output() string { return s.log.String() }

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil // enough to diagnose
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
