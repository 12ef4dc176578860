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

// Client talks to one guest daemon over one stream.
type Client struct {
	conn *watchedConn
	cc   *http2.ClientConn
	http *http.Client

	process    processv1connect.ProcessClient
	filesystem filesystemv1connect.FilesystemClient
	control    controlv1connect.ControlClient
}

// NewClient starts HTTP/2 with prior knowledge on conn. The client owns conn
// from now on: Close closes it.
func NewClient(conn net.Conn) (*Client, error) {
	wc := &watchedConn{Conn: conn, done: make(chan struct{})}
	t := &http2.Transport{
		AllowHTTP:          true,
		MaxHeaderListSize:  1 << 20,
		MaxReadFrameSize:   1 << 20,
		DisableCompression: true,
		// A guest that stops reading or answering pings is declared dead
		// instead of hanging writers forever.
		ReadIdleTimeout:  30 * time.Second,
		PingTimeout:      15 * time.Second,
		WriteByteTimeout: 30 * time.Second,
	}
	cc, err := t.NewClientConn(wc)
	if err != nil {
		wc.Close()
		return nil, fmt.Errorf("start HTTP/2 on guest channel: %w", err)
	}
	c := &Client{conn: wc, cc: cc, http: &http.Client{Transport: cc}}
	opts := []connect.ClientOption{connect.WithReadMaxBytes(MaxMessageBytes), connect.WithSendMaxBytes(MaxMessageBytes)}
	c.process = processv1connect.NewProcessClient(c.http, BaseURL, opts...)
	c.filesystem = filesystemv1connect.NewFilesystemClient(c.http, BaseURL, opts...)
	c.control = controlv1connect.NewControlClient(c.http, BaseURL,
		connect.WithReadMaxBytes(MaxControlAnswerBytes), connect.WithSendMaxBytes(MaxMessageBytes))
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

// Close closes the HTTP/2 connection and the stream.
func (c *Client) Close() error {
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
type watchedConn struct {
	net.Conn
	once sync.Once
	done chan struct{}
}

func (c *watchedConn) dead() { c.once.Do(func() { close(c.done) }) }

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.dead()
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
	c.dead()
	return c.Conn.Close()
}
