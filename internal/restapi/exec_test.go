package restapi

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	processv1 "github.com/spacesandbox/space/api/guest/v1/process"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// TestExecAnswerKeptWhenTheStreamBreaksAfterTheEnd: a host bridge killed
// once a command's whole answer (its end too) was forwarded cuts the stream
// before its HTTP end; the exec answers the command's result, not "lost the
// connection" (the command ran to completion: retrying it would run it
// twice). Cut before the end, it is Unavailable.
func TestExecAnswerKeptWhenTheStreamBreaksAfterTheEnd(t *testing.T) {
	events := []*processv1.ProcessEvent{
		{Event: &processv1.ProcessEvent_Start{Start: &processv1.ProcessEvent_StartEvent{Pid: 7}}},
		{Event: &processv1.ProcessEvent_Data{Data: &processv1.ProcessEvent_DataEvent{Output: &processv1.ProcessEvent_DataEvent_Stdout{Stdout: []byte("done\n")}}}},
		{Event: &processv1.ProcessEvent_End{End: &processv1.ProcessEvent_EndEvent{ExitCode: 3, Exited: true}}},
	}
	for _, tc := range []struct {
		name   string
		events []*processv1.ProcessEvent
		end    bool // the end-stream message is sent before the cut
		want   *sandboxv1.ExecResult
	}{
		{"cut after the end-stream message", events, true, &sandboxv1.ExecResult{ExitCode: 3, Stdout: "done\n"}},
		{"cut after the end event", events, false, &sandboxv1.ExecResult{ExitCode: 3, Stdout: "done\n"}},
		{"cut before the end event", events[:2], false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/connect+proto")
				w.WriteHeader(http.StatusOK)
				for _, ev := range tc.events {
					b, err := proto.Marshal(&processv1.StartResponse{Event: ev})
					if err != nil {
						t.Error(err)
						return
					}
					writeEnvelope(w, 0, b)
				}
				if tc.end {
					writeEnvelope(w, 2, []byte("{}"))
				}
				w.(http.Flusher).Flush()
				// The bridge dies: the connection ends without the
				// chunked body's end.
				panic(http.ErrAbortHandler)
			}))
			defer srv.Close()
			g := &Guest{HTTP: srv.Client(), Base: srv.URL, Process: processv1connect.NewProcessClient(srv.Client(), srv.URL)}
			got, err := runToCompletion(context.Background(), g, &sandboxv1.ExecRequest{Cmd: []string{"true"}}, time.Minute)
			if tc.want == nil {
				if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "lost the connection") {
					t.Fatalf("runToCompletion = %+v, %v; want Unavailable, lost the connection", got, err)
				}
				return
			}
			if err != nil || got.ExitCode != tc.want.ExitCode || got.Stdout != tc.want.Stdout {
				t.Fatalf("runToCompletion = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func writeEnvelope(w http.ResponseWriter, flags byte, b []byte) {
	head := make([]byte, 5)
	head[0] = flags
	binary.BigEndian.PutUint32(head[1:], uint32(len(b)))
	_, _ = w.Write(head)
	_, _ = w.Write(b)
}

// TestTimedOut: however the timeout shows at this end — the context's
// deadline, the far end's deadline_exceeded first, or the killed command's
// end arriving before the stream's error — the answer is the timeout's, and
// nothing else is taken for it.
func TestTimedOut(t *testing.T) {
	far := connect.NewError(connect.CodeDeadlineExceeded, errors.New("the bridge's deadline"))
	broke := connect.NewError(connect.CodeUnavailable, errors.New("unexpected EOF"))
	for _, c := range []struct {
		name           string
		ctxErr, stream error
		ended, exited  bool
		want           bool
	}{
		{"the context's deadline", context.DeadlineExceeded, context.DeadlineExceeded, false, false, true},
		{"the far end's deadline first", nil, far, false, false, true},
		{"killed at the deadline, its end first", context.DeadlineExceeded, nil, true, false, true},
		{"killed by someone else before the deadline", nil, nil, true, false, false},
		{"exited just as the deadline passed", context.DeadlineExceeded, nil, true, true, false},
		{"a broken stream", nil, broke, false, false, false},
		{"the client went away", context.Canceled, context.Canceled, false, false, false},
		{"a clean end", nil, nil, true, true, false},
	} {
		if got := timedOut(c.ctxErr, c.stream, c.ended, c.exited); got != c.want {
			t.Errorf("%s: timedOut = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestExecTimeoutAnsweredByTheFarEnd: a deadline_exceeded from the guest
// side, before this end's timer, is the timeout, not a lost connection.
func TestExecTimeoutAnsweredByTheFarEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/connect+proto")
		w.WriteHeader(http.StatusOK)
		b, _ := proto.Marshal(&processv1.StartResponse{Event: &processv1.ProcessEvent{Event: &processv1.ProcessEvent_Start{Start: &processv1.ProcessEvent_StartEvent{Pid: 7}}}})
		writeEnvelope(w, 0, b)
		writeEnvelope(w, 2, []byte(`{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}`))
	}))
	defer srv.Close()
	g := &Guest{HTTP: srv.Client(), Base: srv.URL, Process: processv1connect.NewProcessClient(srv.Client(), srv.URL)}
	_, err := runToCompletion(context.Background(), g, &sandboxv1.ExecRequest{Cmd: []string{"sleep", "9"}}, time.Minute)
	if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "did not finish within 1m0s") {
		t.Fatalf("runToCompletion = %v; want Unavailable, did not finish within 1m0s", err)
	}
}
