package pinnedproc

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

func init() {
	// The main goroutine keeps the process's main thread, which Go never
	// ends (a locked goroutine returning on it wedges it instead): every
	// goroutine of the tests runs on threads that can end.
	runtime.LockOSThread()
}

// killThreads ends n OS threads of this process the way the ns driver
// does: each goroutine locks its thread and returns without unlocking.
func killThreads(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
		}()
	}
	wg.Wait()
}

func sleeper() *exec.Cmd {
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// TestThreadDeathSignalsAnUnpinnedChild is the kernel behaviour this
// package exists for: a child forked by a thread that then ends gets its
// parent-death signal while this process lives.
func TestThreadDeathSignalsAnUnpinnedChild(t *testing.T) {
	cmd := sleeper()
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread ends when this goroutine does
		started <- cmd.Start()
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child of an ended thread: %v (%v), want killed by its parent-death signal", cmd.ProcessState, err)
	}
}

// TestChildOutlivesEndingThreads starts a child, then ends many of this
// process's threads: the child must live on until it is killed.
func TestChildOutlivesEndingThreads(t *testing.T) {
	c, err := Start(sleeper())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		c.Cmd().Process.Kill()
		c.Wait()
	}()
	for range 20 {
		killThreads(20)
		select {
		case <-c.Done():
			t.Fatalf("the child died while this process lives: %v", c.Cmd().ProcessState)
		case <-time.After(10 * time.Millisecond):
		}
	}
	c.Cmd().Process.Kill()
	if err := c.Wait(); err == nil {
		t.Fatal("Wait of a killed child: nil error")
	}
}

func TestRunReportsTheExit(t *testing.T) {
	if err := Run(exec.Command("true")); err != nil {
		t.Fatalf("true: %v", err)
	}
	err := Run(exec.Command("false"))
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("false: %v, want exit status 1", err)
	}
	if err := Run(exec.Command("/nonexistent/binary")); err == nil {
		t.Fatal("a missing binary: nil error")
	}
}
