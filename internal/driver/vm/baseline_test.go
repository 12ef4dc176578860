package vm

import (
	"bufio"
	"context"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMachineArgsMatchTheDriver checks that the exported arguments are the
// ones the driver's own VMs start with.
func TestMachineArgsMatchTheDriver(t *testing.T) {
	for _, machine := range []string{MachineQ35, MachineMicrovm} {
		for _, accel := range []string{AccelTCG, AccelKVM} {
			args, cmdline := MachineArgs(machine, accel)
			st := &state{ExecID: "e1", MemoryMiB: 256, CPUs: 1, Accel: accel, Kernel: "/k", Initrd: "/i", Machine: machine}
			full := qemuArgs(st)
			if !slices.Equal(full[:len(args)], args) {
				t.Errorf("%s/%s: MachineArgs = %q, the driver starts with %q", machine, accel, args, full[:len(args)])
			}
			i := slices.Index(full, "-append")
			if i < 0 || !strings.HasPrefix(full[i+1], cmdline+" -- ") {
				t.Errorf("%s/%s: command line %q does not start with %q", machine, accel, full[i+1], cmdline)
			}
		}
	}
}

// TestDialQMP runs a session against a scripted QMP server on a unix
// socket that appears only after the dial started.
func TestDialQMP(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan []string, 1)
	go func() {
		time.Sleep(20 * time.Millisecond)
		l, err := net.Listen("unix", sock)
		if err != nil {
			got <- []string{err.Error()}
			return
		}
		defer l.Close()
		c, err := l.Accept()
		if err != nil {
			got <- []string{err.Error()}
			return
		}
		defer c.Close()
		c.Write([]byte(`{"QMP": {"version": {}, "capabilities": []}}` + "\n"))
		var cmds []string
		sc := bufio.NewScanner(c)
		answers := []string{`{"return": {}}`, `{"event": "STOP"}` + "\n" + `{"return": {"status": "paused", "running": false}}`, `{"error": {"class": "GenericError", "desc": "no"}}`}
		for _, a := range answers {
			if !sc.Scan() {
				break
			}
			cmds = append(cmds, sc.Text())
			c.Write([]byte(a + "\n"))
		}
		got <- cmds
	}()
	q, err := DialQMP(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if st, err := q.Status(); err != nil || st != "paused" {
		t.Errorf("Status = %q, %v; want paused", st, err)
	}
	if _, err := q.Execute("cont", nil); err == nil || !strings.Contains(err.Error(), "GenericError: no") {
		t.Errorf("Execute(cont) = %v, want QEMU's error", err)
	}
	want := []string{`{"execute":"qmp_capabilities"}`, `{"execute":"query-status"}`, `{"execute":"cont"}`}
	if cmds := <-got; !slices.Equal(cmds, want) {
		t.Errorf("server saw %q, want %q", cmds, want)
	}
}

func TestDialQMPGivesUpWithTheContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := DialQMP(ctx, filepath.Join(t.TempDir(), "none.sock")); err == nil {
		t.Error("DialQMP to a socket that never appears succeeded")
	}
}
