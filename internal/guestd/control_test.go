package guestd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	"github.com/spacesandbox/space/internal/guestd"
)

func TestReadyAndActivity(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	ready, err := c.Control().Ready(ctx, connect.NewRequest(&controlv1.ReadyRequest{}))
	if err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if m := ready.Msg; m.GetVersion() != guestd.Version || m.GetUptime().AsDuration() <= 0 || m.GetBootTime() == nil || m.GetStartedAt() == nil {
		t.Errorf("Ready = %v, want version %s, uptime, boot time, start time", m, guestd.Version)
	}
	before, err := c.Control().Activity(ctx, connect.NewRequest(&controlv1.ActivityRequest{}))
	if err != nil {
		t.Fatalf("Activity: %v", err)
	}
	// Control calls are not activity; a process is.
	again, _ := c.Control().Activity(ctx, connect.NewRequest(&controlv1.ActivityRequest{}))
	if !again.Msg.GetLastActivity().AsTime().Equal(before.Msg.GetLastActivity().AsTime()) {
		t.Errorf("a control call changed last activity from %v to %v", before.Msg.GetLastActivity().AsTime(), again.Msg.GetLastActivity().AsTime())
	}
	stream, err := c.Process().Start(ctx, connect.NewRequest(sh("exec sleep 100")))
	if err != nil || !stream.Receive() {
		t.Fatalf("Start: %v", err)
	}
	after, err := c.Control().Activity(ctx, connect.NewRequest(&controlv1.ActivityRequest{}))
	if err != nil {
		t.Fatalf("Activity: %v", err)
	}
	if !after.Msg.GetLastActivity().AsTime().After(before.Msg.GetLastActivity().AsTime()) || after.Msg.GetRunningProcesses() != 1 {
		t.Errorf("Activity after start = %v, want later than %v and 1 running process", after.Msg, before.Msg.GetLastActivity().AsTime())
	}
}

func TestReseed(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	resp, err := c.Control().Reseed(ctx, connect.NewRequest(&controlv1.ReseedRequest{Entropy: []byte("some entropy bytes")}))
	if err != nil {
		t.Fatalf("Reseed: %v", err)
	}
	want := controlv1.ReseedMethod_RESEED_METHOD_WRITE
	if os.Geteuid() == 0 {
		want = controlv1.ReseedMethod_RESEED_METHOD_IOCTL
	}
	if resp.Msg.GetMethod() != want {
		t.Errorf("Reseed method = %v, want %v", resp.Msg.GetMethod(), want)
	}
	_, err = c.Control().Reseed(ctx, connect.NewRequest(&controlv1.ReseedRequest{}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.Control().Reseed(ctx, connect.NewRequest(&controlv1.ReseedRequest{Entropy: make([]byte, 5000)}))
	wantCode(t, err, connect.CodeInvalidArgument)
	_, err = c.Control().SetClock(ctx, connect.NewRequest(&controlv1.SetClockRequest{}))
	wantCode(t, err, connect.CodeInvalidArgument)
}

func TestFreezeErrors(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	for _, tt := range []struct {
		paths []string
		want  connect.Code
	}{
		{nil, connect.CodeInvalidArgument},
		{[]string{"relative"}, connect.CodeInvalidArgument},
		{[]string{"/nonexistent-mount"}, connect.CodeNotFound},
	} {
		_, err := c.Control().Freeze(ctx, connect.NewRequest(&controlv1.FreezeRequest{Paths: tt.paths}))
		wantCode(t, err, tt.want)
	}
}

// TestFreezeThaw freezes a loop-mounted ext4 made for the test; it never
// touches a filesystem the host uses.
func TestFreezeThaw(t *testing.T) {
	requireRoot(t, "loop-mounts a filesystem to freeze")
	mnt := loopExt4(t)
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	if _, err := c.Control().Freeze(ctx, connect.NewRequest(&controlv1.FreezeRequest{Paths: []string{mnt}})); err != nil {
		t.Fatalf("Freeze: %v", err)
	}
	_, err := c.Control().Freeze(ctx, connect.NewRequest(&controlv1.FreezeRequest{Paths: []string{mnt}}))
	wantCode(t, err, connect.CodeFailedPrecondition) // already frozen
	if _, err := c.Control().Thaw(ctx, connect.NewRequest(&controlv1.ThawRequest{Paths: []string{mnt}})); err != nil {
		t.Fatalf("Thaw: %v", err)
	}
	if _, err := c.Control().Thaw(ctx, connect.NewRequest(&controlv1.ThawRequest{Paths: []string{mnt}})); err != nil {
		t.Errorf("Thaw of a thawed filesystem: %v, want success", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "after-thaw"), []byte("x"), 0o644); err != nil {
		t.Errorf("write after thaw: %v", err)
	}
}

func loopExt4(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("needs mkfs.ext4 (e2fsprogs) to make a filesystem to freeze")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot loop-mount a test filesystem here: %v: %s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("fsfreeze", "--unfreeze", mnt).Run() // in case the test failed frozen
		for i := 0; i < 50; i++ {
			if err := unix.Unmount(mnt, 0); err == nil || err == unix.EINVAL {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("unmount %s failed", mnt)
	})
	return mnt
}
