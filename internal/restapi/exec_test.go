package restapi

import (
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
