package guest_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	"github.com/spacesandbox/space/internal/guest"
)

// serverBytes is what a guest daemon writes to answer one unary call on
// stream 1 (its SETTINGS, the ack of the client's, the answer's headers
// and body), built frame by frame for the fuzz seeds.
func serverBytes(status string, body []byte, extra func(*http2.Framer)) []byte {
	var out bytes.Buffer
	fr := http2.NewFramer(&out, nil)
	fr.WriteSettings()
	fr.WriteSettingsAck()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.WriteField(hpack.HeaderField{Name: ":status", Value: status})
	enc.WriteField(hpack.HeaderField{Name: "content-type", Value: "application/proto"})
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	if extra != nil {
		extra(fr)
	}
	fr.WriteData(1, true, body)
	return out.Bytes()
}

// awaitRequest reads the client's preface and frames up to the HEADERS of
// its first request (stream 1), and leaves the rest of its writes drained.
func awaitRequest(peer net.Conn) {
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer peer.SetReadDeadline(time.Time{})
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(peer, preface[:]); err != nil {
		return
	}
	fr := http2.NewFramer(nil, peer)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if _, ok := f.(*http2.HeadersFrame); ok {
			go io.Copy(io.Discard, peer)
			return
		}
	}
}

// FuzzGuestAnswer is the host's HTTP/2 client of the guest channel — the
// one the bridge owns — reading whatever a hostile guest writes back
// (catalogue A-1): frames of any type, length and order, HPACK of any
// shape. The call ends with an answer or an error once the guest hangs up,
// never a panic or a hang, and the client then reports the channel done.
func FuzzGuestAnswer(f *testing.F) {
	ready := []byte{0x0a, 0x03, 'v', '0', '1'} // ReadyResponse{version: "v01"}
	f.Add(serverBytes("200", ready, nil))
	f.Add(serverBytes("200", nil, nil))
	f.Add(serverBytes("500", []byte("{}"), nil))
	f.Add(serverBytes("200", ready, func(fr *http2.Framer) {
		fr.WriteWindowUpdate(0, 0)
		fr.WritePing(false, [8]byte{1})
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31})
	}))
	f.Add(serverBytes("200", ready, func(fr *http2.Framer) {
		fr.WriteContinuation(1, false, bytes.Repeat([]byte{0x40}, 64))
		fr.WriteRSTStream(1, http2.ErrCodeProtocol)
		fr.WriteGoAway(1, http2.ErrCodeNo, []byte("bye"))
	}))
	f.Add([]byte("\x00\x00\x00\x04\x00\x00\x00\x00\x00\xff\xff\xff\x01\x05\x00\x00\x00\x01"))
	f.Fuzz(func(t *testing.T, answer []byte) {
		peer, conn := socketPair(t)
		go func() {
			// The answer follows the client's request, as a guest's
			// would; then the guest hangs up.
			awaitRequest(peer)
			peer.Write(answer)
			peer.Close()
		}()
		c, err := guest.NewClient(conn)
		if err != nil {
			t.Fatalf("NewClient: %v", err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, _ = c.Control().Ready(ctx, connect.NewRequest(&controlv1.ReadyRequest{}))
		if ctx.Err() != nil {
			t.Fatal("Ready still waiting 20s after the guest hung up")
		}
		select {
		case <-c.Done():
		case <-ctx.Done():
			t.Fatal("the client did not see the channel end")
		}
	})
}

// TestGuestAnswerSeed: the fuzz seed built by serverBytes is an answer the
// client takes (Ready with its version), so that the fuzzer starts from
// the paths a well-behaved guest takes, not only from refusals.
func TestGuestAnswerSeed(t *testing.T) {
	peer, conn := socketPair(t)
	go func() {
		awaitRequest(peer)
		peer.Write(serverBytes("200", []byte{0x0a, 0x03, 'v', '0', '1'}, nil))
		io.Copy(io.Discard, peer)
	}()
	defer peer.Close()
	c, err := guest.NewClient(conn)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := c.Control().Ready(ctx, connect.NewRequest(&controlv1.ReadyRequest{}))
	if err != nil || resp.Msg.GetVersion() != "v01" {
		t.Fatalf("Ready on the seed answer: %v, %v; want version v01", resp, err)
	}
}
