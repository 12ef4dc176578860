// Package pinnedproc starts child processes whose parent-death signal
// (Pdeathsig) means what it says: that this process died.
//
// Linux sends the parent-death signal when the thread that forked the child
// exits, not the process. Go ends a thread whenever a goroutine locked to it
// returns without unlocking, which this project does on purpose to throw away
// threads it moved into another namespace or gave another uid (the ns
// driver's startOwned, its network helpers, the gateway's namespace dialer).
// A child started by plain cmd.Start from a thread that later dies that way
// is signalled at a random moment while this process lives on. Start forks
// from a goroutine locked to its thread that waits for the child, so the
// thread ends only after the child has, or with this process.
package pinnedproc

import (
	"os/exec"
	"runtime"
)

// Child is a started command whose Wait runs on the thread that forked it.
type Child struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts cmd from a goroutine locked to its OS thread, which then calls
// cmd.Wait. Because Wait runs there, the caller must not call cmd.Wait, and
// must not read from cmd.StdoutPipe or cmd.StderrPipe (Wait closes them once
// the child exits, possibly mid-read): give the command an io.Writer, or an
// *os.File of a pipe the caller made.
func Start(cmd *exec.Cmd) (*Child, error) {
	c := &Child{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		c.err = cmd.Wait()
		// Returns still locked: the thread ends with the child, and no
		// other goroutine ever ran on it in between.
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return c, nil
}

// Run starts cmd as Start does and waits for it.
func Run(cmd *exec.Cmd) error {
	c, err := Start(cmd)
	if err != nil {
		return err
	}
	return c.Wait()
}

// Done is closed once the child has exited and Wait's result is known.
func (c *Child) Done() <-chan struct{} { return c.done }

// Wait waits for the child to exit and returns what cmd.Wait returned.
func (c *Child) Wait() error {
	<-c.done
	return c.err
}

// Cmd is the started command (its Process and, once Done, ProcessState).
func (c *Child) Cmd() *exec.Cmd { return c.cmd }
