package connecterr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestEveryClassAndReasonRoundTrips sends an error of every class and of
// every reason through a real Connect handler and client, and checks that
// the caller's error is of the same class and reason, with the same text.
func TestEveryClassAndReasonRoundTrips(t *testing.T) {
	var cases []error
	for _, c := range errdefs.Classes() {
		cases = append(cases, fmt.Errorf("thing x: %w", c))
	}
	for _, r := range errdefs.Reasons() {
		cases = append(cases, fmt.Errorf("thing y: %w", r))
	}
	cases = append(cases, errors.New("of no class"), fmt.Errorf("step: %w", context.DeadlineExceeded))
	for _, sent := range cases {
		t.Run(sent.Error(), func(t *testing.T) {
			for _, stream := range []bool{false, true} {
				got := roundTrip(t, sent, stream)
				if got.Error() != sent.Error() {
					t.Errorf("stream %v: message %q, want %q", stream, got.Error(), sent.Error())
				}
				if want, have := errdefs.ClassOf(sent), errdefs.ClassOf(got); want != have {
					t.Errorf("stream %v: class %v, want %v", stream, have, want)
				}
				if want, have := errdefs.ReasonOf(sent), errdefs.ReasonOf(got); want != have {
					t.Errorf("stream %v: reason %q, want %q", stream, have, want)
				}
				if r := errdefs.ReasonError(errdefs.ReasonOf(sent)); r != nil && !errors.Is(got, r) {
					t.Errorf("stream %v: errors.Is(%v, reason sentinel) is false", stream, got)
				}
				if errors.Is(sent, context.DeadlineExceeded) != errors.Is(got, context.DeadlineExceeded) {
					t.Errorf("stream %v: deadline lost: %v", stream, got)
				}
			}
		})
	}
}

// TestTableIsABijection checks that no two classes share a code and that
// every class has one.
func TestTableIsABijection(t *testing.T) {
	seen := map[connect.Code]error{}
	for _, c := range errdefs.Classes() {
		code := Code(c)
		if code == connect.CodeUnknown {
			t.Errorf("class %v has no code", c)
		}
		if prev, ok := seen[code]; ok {
			t.Errorf("classes %v and %v share code %v", prev, c, code)
		}
		seen[code] = c
		if ClassOf(code) != c {
			t.Errorf("code %v names class %v, want %v", code, ClassOf(code), c)
		}
	}
}

// TestReasonOfAnotherClassIsDropped: a peer that sends a reason that does
// not belong to the code's class is not believed about the reason.
func TestReasonOfAnotherClassIsDropped(t *testing.T) {
	ce := connect.NewError(connect.CodeNotFound, errors.New("x"))
	ce.Meta().Set(ReasonKey, string(errdefs.ReasonOf(errdefs.ErrRateLimited)))
	got := Decode(ce)
	if !errors.Is(got, errdefs.ErrNotFound) || errors.Is(got, errdefs.ErrRateLimited) || errdefs.ReasonOf(got) != "" {
		t.Fatalf("got %v (reason %q), want not found without reason", got, errdefs.ReasonOf(got))
	}
}

// roundTrip answers one call with sent and returns the error the client
// sees: a unary call, or a server stream when stream.
func roundTrip(t *testing.T, sent error, stream bool) error {
	t.Helper()
	mux := http.NewServeMux()
	opts := connect.WithInterceptors(Interceptor())
	mux.Handle("/t.T/Unary", connect.NewUnaryHandler("/t.T/Unary", func(context.Context, *connect.Request[emptyMsg]) (*connect.Response[emptyMsg], error) {
		return nil, sent
	}, opts, connect.WithCodec(jsonCodec{})))
	mux.Handle("/t.T/Stream", connect.NewServerStreamHandler("/t.T/Stream", func(_ context.Context, _ *connect.Request[emptyMsg], s *connect.ServerStream[emptyMsg]) error {
		if err := s.Send(&emptyMsg{}); err != nil {
			return err
		}
		return sent
	}, opts, connect.WithCodec(jsonCodec{})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	if !stream {
		c := connect.NewClient[emptyMsg, emptyMsg](srv.Client(), srv.URL+"/t.T/Unary", connect.WithCodec(jsonCodec{}))
		_, err := c.CallUnary(ctx, connect.NewRequest(&emptyMsg{}))
		if err == nil {
			t.Fatal("the call succeeded")
		}
		return Decode(err)
	}
	c := connect.NewClient[emptyMsg, emptyMsg](srv.Client(), srv.URL+"/t.T/Stream", connect.WithCodec(jsonCodec{}))
	st, err := c.CallServerStream(ctx, connect.NewRequest(&emptyMsg{}))
	if err != nil {
		return Decode(err)
	}
	defer st.Close()
	for st.Receive() {
	}
	if st.Err() == nil {
		t.Fatal("the stream ended without error")
	}
	return Decode(st.Err())
}
