package bridge

import (
	"io"
	"net"
	"sync"
)

// CopyBufferSize is the buffer the guest-path proxies copy bodies with. The
// standard 32 KiB makes a 100 MiB file 3,200 reads, writes and (with
// FlushInterval -1) flushes per hop, each a system call and on the guest
// channel a hand-off to the HTTP/2 writer; 256 KiB makes it 400.
const CopyBufferSize = 256 << 10

// ProxyBuffers is an httputil.BufferPool of CopyBufferSize buffers, for the
// node's and the bridge's reverse proxies.
var ProxyBuffers = &bufferPool{}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, CopyBufferSize)
}

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) != CopyBufferSize {
		return
	}
	buf = buf[:CopyBufferSize]
	b.p.Put(&buf)
}

// LargeCopyBody wraps a request body so that an HTTP/1 client sends it in
// CopyBufferSize writes: the transport io.Copies a body into its connection,
// and a unix socket has no ReadFrom, so it would take 32 KiB at a time.
func LargeCopyBody(body io.ReadCloser) io.ReadCloser { return largeCopyBody{body} }

type largeCopyBody struct{ io.ReadCloser }

func (b largeCopyBody) WriteTo(w io.Writer) (int64, error) {
	buf := ProxyBuffers.Get()
	defer ProxyBuffers.Put(buf)
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{b.ReadCloser}, buf)
}

// SocketBufferSize is the kernel buffer asked for on the local sockets a
// guest request crosses (node ↔ bridge, bridge ↔ guest channel). With the
// default (~208 KiB) a 256 KiB write blocks halfway and the two processes
// hand the CPU back and forth for every chunk; on a virtual machine each
// of those switches is expensive. The kernel caps it at net.core.wmem_max
// and rmem_max.
const SocketBufferSize = 1 << 20

// SetSocketBuffers asks for SocketBufferSize send and receive buffers on c
// when it is a socket; it is an optimisation only, so errors are ignored.
func SetSocketBuffers(c net.Conn) {
	type buffered interface {
		SetReadBuffer(int) error
		SetWriteBuffer(int) error
	}
	if s, ok := c.(buffered); ok {
		_ = s.SetReadBuffer(SocketBufferSize)
		_ = s.SetWriteBuffer(SocketBufferSize)
	}
}

// BufferedListener sets SocketBufferSize buffers on every accepted
// connection.
type BufferedListener struct{ net.Listener }

// Accept waits for the next connection and sets its buffers.
func (l BufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		SetSocketBuffers(c)
	}
	return c, err
}
