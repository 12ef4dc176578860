// Package guest is the host side of the guest protocol: a client of
// space-guest over the one byte stream of a sandbox execution.
//
// The stream carries HTTP/2 cleartext with prior knowledge; the client opens
// exactly one HTTP/2 connection on it and never reconnects. When the stream
// dies, Done is closed and every call fails.
package guest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/net/http2"

	controlv1 "github.com/spacesandbox/space/api/guest/v1/control"
	"github.com/spacesandbox/space/api/guest/v1/control/controlv1connect"
	"github.com/spacesandbox/space/api/guest/v1/filesystem/filesystemv1connect"
	"github.com/spacesandbox/space/api/guest/v1/process/processv1connect"
)

// BaseURL is the URL prefix of every request to the guest; the host name is
// not resolved, the stream is already open.
const BaseURL = "http://guest"

// MaxMessageBytes bounds one RPC message read from the guest, so a hostile
// guest cannot exhaust host memory with one answer.
const MaxMessageBytes = 16 << 20

// MaxControlAnswerBytes bounds an answer of the guest's control service
// (Ready, Init, Activity, Freeze, Thaw, Reseed, SetClock: a version, a few
// timestamps and counters), so that a guest answering the bridge's own calls
// with megabytes makes it hold no more than this for each: the bridge polls
// Ready while a hostile guest has the channel, and a 16 MiB answer costs it
// three times that in buffers.
const MaxControlAnswerBytes = 64 << 10

// MaxInFlightBytes bounds what the guest may have sent on its channel that
// the host has not yet consumed, over all its streams together: the HTTP/2
// connection window the host grants. A guest answering a thousand streams
// that nobody reads makes the host hold at most this much of its bytes; a
// guest sending past the window breaks flow control and loses the channel.
// (The HTTP/2 client's default is 1 GiB per channel.)
const MaxInFlightBytes = 32 << 20

// MaxInFlightBytesPerStream is the window of one stream: a client that
// stops reading one stream holds this much of the guest's answer on the
// host, and the channel's other streams keep MaxInFlightBytes minus this.
// (The HTTP/2 client's default is 4 MiB.)
const MaxInFlightBytesPerStream = 1 << 20

// Client talks to one guest daemon over one stream.
type Client struct {
	conn *watchedConn
	cc   *http2.ClientConn
	http *http.Client
	errs *ProtocolErrors

	process    processv1connect.ProcessClient
	filesystem filesystemv1connect.FilesystemClient
	control    controlv1connect.ControlClient
}

// NewClient starts HTTP/2 with prior knowledge on conn. The client owns conn
// from now on: Close closes it.
func NewClient(conn net.Conn) (*Client, error) {
	errs := newProtocolErrors()
	wc := &watchedConn{Conn: conn, done: make(chan struct{}), errs: errs, meter: newFrameMeter()}
	// The flow-control windows are set through net/http's HTTP2Config, the
	// only way the HTTP/2 client takes them.
	t1 := &http.Transport{HTTP2: &http.HTTP2Config{
		MaxReceiveBufferPerConnection: MaxInFlightBytes,
		MaxReceiveBufferPerStream:     MaxInFlightBytesPerStream,
	}}
	t, err := http2.ConfigureTransports(t1)
	if err != nil {
		wc.Close()
		return nil, fmt.Errorf("configure HTTP/2 for the guest channel: %w", err)
	}
	t.AllowHTTP = true
	t.MaxHeaderListSize = 1 << 20
	t.MaxReadFrameSize = 1 << 20
	t.DisableCompression = true
	// A guest that stops reading is declared dead instead of hanging
	// writers forever. There are no health-check pings (ReadIdleTimeout):
	// the channel is a local socket, whose end is always seen when the
	// guest's process (or its VMM) dies, and a paused sandbox's guest is
	// frozen and answers no ping — with them every sandbox paused for 45 s
	// lost its channel (conn_close_lost_ping) and failed.
	t.WriteByteTimeout = 30 * time.Second
	t.CountError = errs.count
	cc, err := t.NewClientConn(wc)
	if err != nil {
		wc.Close()
		return nil, fmt.Errorf("start HTTP/2 on guest channel: %w", err)
	}
	c := &Client{conn: wc, cc: cc, http: &http.Client{Transport: cc}, errs: errs}
	// No gzip: Connect clients offer it by default, and the guest then
	// compresses every answer with a fresh gzip writer (whose reset alone
	// was half the guest's CPU in a warm-pool claim) for messages of a few
	// bytes that only cross a local socket.
	noGzip := connect.WithAcceptCompression("gzip", nil, nil)
	opts := []connect.ClientOption{connect.WithReadMaxBytes(MaxMessageBytes), connect.WithSendMaxBytes(MaxMessageBytes), noGzip}
	c.process = processv1connect.NewProcessClient(c.http, BaseURL, opts...)
	c.filesystem = filesystemv1connect.NewFilesystemClient(c.http, BaseURL, opts...)
	c.control = controlv1connect.NewControlClient(c.http, BaseURL,
		connect.WithReadMaxBytes(MaxControlAnswerBytes), connect.WithSendMaxBytes(MaxMessageBytes), noGzip)
	return c, nil
}

// HTTPClient returns a client whose requests (to BaseURL paths such as
// /files, /health, /envs) go over the guest stream. Callers bound response
// bodies themselves; they are streamed, never buffered here.
func (c *Client) HTTPClient() *http.Client { return c.http }

// Process returns the envd-compatible process service client.
func (c *Client) Process() processv1connect.ProcessClient { return c.process }

// Filesystem returns the envd-compatible filesystem service client.
func (c *Client) Filesystem() filesystemv1connect.FilesystemClient { return c.filesystem }

// Control returns the control service client (host bridge only).
func (c *Client) Control() controlv1connect.ControlClient { return c.control }

// Done is closed when the stream to the guest has ended.
func (c *Client) Done() <-chan struct{} { return c.conn.done }

// ProtocolErrors returns how many protocol errors the guest made on this
// channel, by kind.
func (c *Client) ProtocolErrors() map[string]uint64 { return c.errs.counts() }

// Err is why the channel ended, once Done is closed: an error wrapping
// ErrProtocol (and naming the first kind) when the guest broke the
// protocol, nil when it closed the channel or the host did.
func (c *Client) Err() error {
	select {
	case <-c.conn.done:
	default:
		return nil
	}
	return c.errs.err()
}

// Close closes the HTTP/2 connection and the stream.
func (c *Client) Close() error {
	c.conn.owned.Store(true)
	err := c.cc.Close()
	if cerr := c.conn.Close(); err == nil && !errors.Is(cerr, net.ErrClosed) {
		err = cerr
	}
	return err
}

// Wait blocks until the guest answers Ready or ctx is done.
func (c *Client) Wait(ctx context.Context) error {
	_, err := c.control.Ready(ctx, connect.NewRequest(&controlv1.ReadyRequest{}))
	if err != nil {
		return fmt.Errorf("guest ready: %w", err)
	}
	return nil
}

// watchedConn closes done once a read or write fails or the conn is closed.
// The HTTP/2 client reads continuously, so a dead stream is seen promptly.
//
// It also tells who ended the channel. The HTTP/2 client names some
// protocol errors (CountError) but not all: a WINDOW_UPDATE overflowing the
// window, a PUSH_PROMISE or a guest that stops reading make it close the
// connection without naming why. A close by the client
// while its reads still succeed, and not asked for by the Client's owner,
// is such an end, counted as hostEndedChannel.
type watchedConn struct {
	net.Conn
	once     sync.Once
	done     chan struct{}
	errs     *ProtocolErrors
	meter    *frameMeter // only the HTTP/2 client's read loop reads
	readDead atomic.Bool // a read failed: the guest's end closed or broke
	owned    atomic.Bool // Client.Close was called
}

// hostEndedChannel is the kind counted when the HTTP/2 client ends the
// channel for a reason it does not name (see watchedConn).
const hostEndedChannel = "host_ended_channel"

func (c *watchedConn) dead() { c.once.Do(func() { close(c.done) }) }

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.readDead.Store(true)
		c.dead()
	}
	if wait := c.meter.observe(b[:n], time.Now()); wait > 0 {
		// The guest floods control frames: it waits, not the host.
		select {
		case <-time.After(wait):
		case <-c.done:
		}
	}
	return n, err
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil {
		c.dead()
	}
	return n, err
}

func (c *watchedConn) Close() error {
	if !c.owned.Load() && !c.readDead.Load() && c.errs.none() {
		c.errs.count(hostEndedChannel)
	}
	c.dead()
	return c.Conn.Close()
}
