package guestd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	"github.com/spacesandbox/space/internal/failpoint"
)

// controlService implements space.guest.v1.Control for the host bridge.
type controlService struct {
	d *Daemon
}

func (s *controlService) Ready(context.Context, *connect.Request[controlv1.ReadyRequest]) (*connect.Response[controlv1.ReadyResponse], error) {
	resp := &controlv1.ReadyResponse{Version: Version, StartedAt: timestamppb.New(s.d.started)}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err == nil {
		up := time.Duration(ts.Nano())
		resp.Uptime = durationpb.New(up)
		resp.BootTime = timestamppb.New(time.Now().Add(-up))
	}
	return connect.NewResponse(resp), nil
}

func (s *controlService) Init(_ context.Context, req *connect.Request[controlv1.InitRequest]) (*connect.Response[controlv1.InitResponse], error) {
	m := req.Msg
	if err := s.validateInit(m); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("init: %w", err))
	}
	resp := &controlv1.InitResponse{Version: Version}
	if m.GetHostname() != "" {
		if err := unix.Sethostname([]byte(m.GetHostname())); err != nil {
			return nil, rpcError(fmt.Errorf("init: set hostname %q: %w", m.GetHostname(), err))
		}
		resp.HostnameSet = true
	}
	if len(m.GetEntropy()) > 0 {
		method, err := reseed(m.GetEntropy())
		if err != nil {
			return nil, rpcError(fmt.Errorf("init: %w", err))
		}
		resp.Reseed = method
	}
	id := &s.d.ident
	id.mu.Lock()
	id.sandboxID, id.generation, id.activationID = m.GetSandboxId(), m.GetGeneration(), m.GetActivationId()
	id.env = m.GetEnvVars()
	id.defaultUser, id.defaultWorkdir, id.accessToken = m.GetDefaultUser(), m.GetDefaultWorkdir(), m.GetAccessToken()
	id.mu.Unlock()
	if n := m.GetPidsMax(); n > 0 {
		if err := s.d.limitPids(n); err != nil {
			resp.PidsError = err.Error()
		} else {
			resp.PidsLimited = true
		}
	}
	if m.GetNow() != nil {
		if err := setClock(m.GetNow().AsTime()); err != nil {
			resp.ClockError = err.Error()
		} else {
			resp.ClockSet = true
		}
	}
	s.d.log.Info("identity installed", "sandbox", m.GetSandboxId(), "generation", m.GetGeneration(),
		"activation", m.GetActivationId(), "reseed", resp.Reseed.String(), "clock_set", resp.ClockSet,
		"pids_limited", resp.PidsLimited, "pids_error", resp.PidsError)
	s.d.loadImage()
	s.d.autostart()
	if nr := s.d.startCommand(); nr != nil {
		// proto3 strings must be valid UTF-8 or the answer fails to marshal.
		nr.Detail = strings.ToValidUTF8(nr.Detail, "?")
		nr.LastStatus = strings.ToValidUTF8(nr.LastStatus, "?")
		resp.StartNotReady = nr
	}
	failpoint.GuestAfterInit.Hit()
	return connect.NewResponse(resp), nil
}

func (s *controlService) validateInit(m *controlv1.InitRequest) error {
	for k, v := range m.GetEnvVars() {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("environment variable %q: name must be non-empty without '=' or NUL, value without NUL", k)
		}
	}
	// The default user need not exist: requests that do not name a user fall
	// back to root where the template lacks it (see userNamed). Its name must
	// still be well formed.
	if u := m.GetDefaultUser(); u != "" {
		if err := validUserName(u); err != nil {
			return fmt.Errorf("default user: %w", err)
		}
	}
	if wd := m.GetDefaultWorkdir(); wd != "" && (!path.IsAbs(wd) || strings.ContainsRune(wd, 0)) {
		return fmt.Errorf("default workdir %q: want an absolute path", wd)
	}
	if h := m.GetHostname(); h != "" && !validHostname(h) {
		return fmt.Errorf("hostname %q: want 1-64 letters, digits, '-' or '.'", h)
	}
	return nil
}

func validHostname(h string) bool {
	if len(h) > 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

func (s *controlService) Activity(context.Context, *connect.Request[controlv1.ActivityRequest]) (*connect.Response[controlv1.ActivityResponse], error) {
	return connect.NewResponse(&controlv1.ActivityResponse{
		LastActivity:     timestamppb.New(time.Unix(0, s.d.lastActivity.Load())),
		RunningProcesses: uint32(s.d.procs.count()),
	}), nil
}

func (s *controlService) Freeze(_ context.Context, req *connect.Request[controlv1.FreezeRequest]) (*connect.Response[controlv1.FreezeResponse], error) {
	paths, err := freezePaths(req.Msg.GetPaths())
	if err != nil {
		return nil, err
	}
	for i, p := range paths {
		if err := fsIoctl(p, fiFreeze); err != nil {
			for _, done := range paths[:i] {
				_ = fsIoctl(done, fiThaw)
			}
			return nil, freezeError("freeze", p, err)
		}
	}
	failpoint.GuestAfterFreeze.Hit()
	return connect.NewResponse(&controlv1.FreezeResponse{}), nil
}

func (s *controlService) Thaw(_ context.Context, req *connect.Request[controlv1.ThawRequest]) (*connect.Response[controlv1.ThawResponse], error) {
	paths, err := freezePaths(req.Msg.GetPaths())
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, p := range paths {
		if err := fsIoctl(p, fiThaw); err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: not frozen
			errs = append(errs, freezeError("thaw", p, err))
		}
	}
	if len(errs) > 0 {
		return nil, errs[0]
	}
	return connect.NewResponse(&controlv1.ThawResponse{}), nil
}

func (s *controlService) Reseed(_ context.Context, req *connect.Request[controlv1.ReseedRequest]) (*connect.Response[controlv1.ReseedResponse], error) {
	if len(req.Msg.GetEntropy()) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("reseed: no entropy given"))
	}
	method, err := reseed(req.Msg.GetEntropy())
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&controlv1.ReseedResponse{Method: method}), nil
}

func (s *controlService) SetClock(_ context.Context, req *connect.Request[controlv1.SetClockRequest]) (*connect.Response[controlv1.SetClockResponse], error) {
	if req.Msg.GetNow() == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("set clock: now is missing"))
	}
	if err := req.Msg.GetNow().CheckValid(); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("set clock: %w", err))
	}
	if err := setClock(req.Msg.GetNow().AsTime()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&controlv1.SetClockResponse{}), nil
}

// setClock sets CLOCK_REALTIME. Without CAP_SYS_TIME over the real clock (the
// ns substrate) it answers FailedPrecondition: the host's clock is shared.
func setClock(now time.Time) error {
	ts := unix.NsecToTimespec(now.UnixNano())
	err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EPERM):
		return connect.NewError(connect.CodeFailedPrecondition,
			errors.New("set clock: not permitted; this substrate shares the host clock, which is already correct"))
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf("set clock: %w", err))
}

func freezePaths(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no paths given: name the mount points to freeze or thaw"))
	}
	if len(paths) > 64 {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("more than 64 paths"))
	}
	for _, p := range paths {
		if !path.IsAbs(p) || strings.ContainsRune(p, 0) {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %q: want an absolute path", p))
		}
	}
	return paths, nil
}

func freezeError(op, p string, err error) error {
	err = fmt.Errorf("%s %s: %w", op, p, err)
	switch {
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTTY):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%w (the filesystem does not support freezing)", err))
	case errors.Is(err, unix.EBUSY):
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("%w (already frozen)", err))
	}
	return rpcError(err)
}

// The ioctls of linux/fs.h: _IOWR('X', 119, int) and _IOWR('X', 120, int).
const (
	fiFreeze = 0xC0045877
	fiThaw   = 0xC0045878
)

func fsIoctl(p string, req uint) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, uintptr(req), 0)
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
