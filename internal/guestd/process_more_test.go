package guestd_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/internal/guest"
	"github.com/spacesandbox/space/internal/guestd"
)

func TestConnectByTagAfterStartClientLeft(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	startCtx, leave := context.WithCancel(ctx)
	req := &processv1.StartRequest{
		Process: &processv1.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "read x; echo \"got $x\""}},
		Tag:     ptr("server"), Stdin: ptr(true),
	}
	stream, err := c.Process().Start(startCtx, connect.NewRequest(req))
	if err != nil || !stream.Receive() {
		t.Fatalf("Start: %v %v", err, stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	leave() // the Start client goes away; the process must keep running
	stream.Close()

	_, err = c.Process().Start(ctx, connect.NewRequest(req))
	if err == nil {
		s2, _ := c.Process().Start(ctx, connect.NewRequest(req))
		_, err = collect(t, s2)
	}
	wantCode(t, err, connect.CodeAlreadyExists)

	list, err := c.Process().List(ctx, connect.NewRequest(&processv1.ListRequest{}))
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if ps := list.Msg.GetProcesses(); len(ps) != 1 || ps[0].GetPid() != pid || ps[0].GetTag() != "server" || ps[0].GetConfig().GetCmd() != "/bin/sh" {
		t.Fatalf("List = %v, want one process pid %d tag server", ps, pid)
	}

	byTag := &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Tag{Tag: "server"}}
	subs := make([]*connect.ServerStreamForClient[processv1.ConnectResponse], 2)
	for i := range subs {
		subs[i], err = c.Process().Connect(ctx, connect.NewRequest(&processv1.ConnectRequest{Process: byTag}))
		if err != nil || !subs[i].Receive() {
			t.Fatalf("Connect %d: %v %v", i, err, subs[i].Err())
		}
		if got := subs[i].Msg().GetEvent().GetStart().GetPid(); got != pid {
			t.Fatalf("Connect %d start pid = %d, want %d", i, got, pid)
		}
	}
	if _, err := c.Process().SendInput(ctx, connect.NewRequest(&processv1.SendInputRequest{
		Process: byTag, Input: &processv1.ProcessInput{Input: &processv1.ProcessInput_Stdin{Stdin: []byte("hi\n")}},
	})); err != nil {
		t.Fatalf("SendInput: %v", err)
	}
	for i, s := range subs {
		var out strings.Builder
		var end *processv1.ProcessEvent_EndEvent
		for s.Receive() {
			out.Write(s.Msg().GetEvent().GetData().GetStdout())
			if e := s.Msg().GetEvent().GetEnd(); e != nil {
				end = e
			}
		}
		if out.String() != "got hi\n" || end == nil || end.GetExitCode() != 0 {
			t.Errorf("subscriber %d got %q end %v, want %q and exit 0", i, out.String(), end, "got hi\n")
		}
	}
	_, err = c.Process().Connect(ctx, connect.NewRequest(&processv1.ConnectRequest{Process: byTag}))
	if err == nil {
		s, _ := c.Process().Connect(ctx, connect.NewRequest(&processv1.ConnectRequest{Process: byTag}))
		_, err = collect(t, s)
	}
	wantCode(t, err, connect.CodeNotFound)
}

func TestEnvAndCwd(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	req := sh(`printf '%s|%s|%s|%s' "$FOO" "$(pwd)" "$HOME" "$USER"`)
	req.Process.Envs = map[string]string{"FOO": "bar"}
	req.Process.Cwd = ptr("/tmp")
	res := run(t, c, req, "")
	me := self(t)
	if got, want := res.stdout.String(), "bar|/tmp|"+me.HomeDir+"|"+me.Username; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	bad := sh("true")
	bad.Process.Envs = map[string]string{"A=B": "x"}
	stream, err := c.Process().Start(testCtx(t), connect.NewRequest(bad))
	if err == nil {
		_, err = collect(t, stream)
	}
	wantCode(t, err, connect.CodeInvalidArgument)
}

func TestUserSwitch(t *testing.T) {
	requireRoot(t, "switches to another user")
	c := startGuest(t, guestd.Config{})
	res := run(t, c, sh(`printf '%s|%s|%s' "$(id -un)" "$USER" "$(pwd)"`), "nobody")
	// nobody's home does not exist, so the process starts in /.
	if got, want := res.stdout.String(), "nobody|nobody|/"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	stream, err := c.Process().Start(testCtx(t), func() *connect.Request[processv1.StartRequest] {
		r := connect.NewRequest(sh("true"))
		r.Header().Set("Authorization", basicAuth("no-such-user"))
		return r
	}())
	if err == nil {
		_, err = collect(t, stream)
	}
	wantCode(t, err, connect.CodeUnauthenticated)
}

func TestInitInstallsDefaults(t *testing.T) {
	requireRoot(t, "switches to another user")
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	resp, err := c.Control().Init(ctx, connect.NewRequest(&controlv1.InitRequest{
		SandboxId: "sbx1", Generation: 2, ActivationId: "act", EnvVars: map[string]string{"INIT_VAR": "v1"},
		DefaultUser: "nobody", DefaultWorkdir: "/tmp", Entropy: []byte("0123456789abcdef"),
	}))
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	if resp.Msg.GetVersion() != guestd.Version || resp.Msg.GetReseed() != controlv1.ReseedMethod_RESEED_METHOD_IOCTL {
		t.Errorf("Init = %v, want version %s and reseed by ioctl (root)", resp.Msg, guestd.Version)
	}
	res := run(t, c, sh(`printf '%s|%s|%s' "$INIT_VAR" "$(id -un)" "$(pwd)"`), "")
	if got, want := res.stdout.String(), "v1|nobody|/tmp"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
	envs := getEnvs(t, c)
	if envs["INIT_VAR"] != "v1" {
		t.Errorf("/envs = %v, want INIT_VAR=v1", envs)
	}
	for _, bad := range []*controlv1.InitRequest{
		{DefaultUser: "bad user name"},
		{DefaultWorkdir: "relative"},
		{EnvVars: map[string]string{"": "x"}},
		{Hostname: "bad host"},
	} {
		_, err := c.Control().Init(ctx, connect.NewRequest(bad))
		wantCode(t, err, connect.CodeInvalidArgument)
	}
}

// TestMissingDefaultUserFallsBackToRoot: a template without the platform's
// default account still runs commands, as root, in an existing directory.
func TestMissingDefaultUserFallsBackToRoot(t *testing.T) {
	requireRoot(t, "expects to run as root")
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	_, err := c.Control().Init(ctx, connect.NewRequest(&controlv1.InitRequest{DefaultUser: "no-such-user", DefaultWorkdir: "/no/such/dir"}))
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	res := run(t, c, sh(`printf '%s|%s' "$(id -u)" "$(pwd)"`), "")
	if got := res.stdout.String(); got != "0|/root" && got != "0|/" {
		t.Errorf("output = %q, want root in its home or /", got)
	}
}

func getEnvs(t *testing.T, c *guest.Client) map[string]string {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t), "GET", guest.BaseURL+"/envs", nil)
	resp, err := c.HTTPClient().Do(req)
	if err != nil {
		t.Fatalf("GET /envs: %v", err)
	}
	defer resp.Body.Close()
	var m map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("GET /envs: decode: %v", err)
	}
	return m
}

func TestKeepaliveWhileIdle(t *testing.T) {
	c := startGuest(t, guestd.Config{})
	ctx := testCtx(t)
	req := connect.NewRequest(sh("exec sleep 100"))
	req.Header().Set("Keepalive-Ping-Interval", "1")
	stream, err := c.Process().Start(ctx, req)
	if err != nil || !stream.Receive() {
		t.Fatalf("Start: %v", err)
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	if !stream.Receive() || stream.Msg().GetEvent().GetKeepalive() == nil {
		t.Fatalf("second event = %v (%v), want a keepalive while the process is silent", stream.Msg().GetEvent(), stream.Err())
	}
	if _, err := c.Process().SendSignal(ctx, connect.NewRequest(&processv1.SendSignalRequest{
		Process: &processv1.ProcessSelector{Selector: &processv1.ProcessSelector_Pid{Pid: pid}}, Signal: processv1.Signal_SIGNAL_SIGKILL,
	})); err != nil {
		t.Fatalf("SendSignal: %v", err)
	}
	for stream.Receive() {
	}
}

func TestProcessLimit(t *testing.T) {
	c := startGuest(t, guestd.Config{MaxProcesses: 1})
	ctx := testCtx(t)
	stream, err := c.Process().Start(ctx, connect.NewRequest(sh("exec sleep 100")))
	if err != nil || !stream.Receive() {
		t.Fatalf("Start: %v", err)
	}
	second, err := c.Process().Start(ctx, connect.NewRequest(sh("true")))
	if err == nil {
		_, err = collect(t, second)
	}
	wantCode(t, err, connect.CodeResourceExhausted)
}
