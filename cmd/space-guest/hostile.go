//go:build hostileguest

// This file is built only with the hostileguest tag, which the e2e tests
// use for the guest of their hostile-guest harness (e2e/hostileguest_test.go);
// a release build never has it. With the tag, space-guest is the real guest
// daemon unless its sandbox's disk holds HostileModeFile when it starts:
// then, instead of serving the guest protocol, it abuses its channel to the
// host bridge as that file says, and exits when the channel ends.

package main

import (
	"crypto/rand"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// HostileModeFile names the abuse the guest commits: its sandbox's user
// writes it, and the next execution of the sandbox's disk commits it.
const HostileModeFile = "/home/user/.space-hostile-guest"

func init() {
	mode, err := os.ReadFile(HostileModeFile)
	if err != nil {
		return
	}
	conn := hostileChannel()
	if conn == nil {
		return
	}
	abuse(strings.TrimSpace(string(mode)), conn)
	os.Exit(0)
}

// hostileChannel is the channel --channel fd:N names, or nil.
func hostileChannel() net.Conn {
	for i, a := range os.Args {
		v, ok := strings.CutPrefix(a, "--channel=")
		if !ok && a == "--channel" && i+1 < len(os.Args) {
			v, ok = os.Args[i+1], true
		}
		fd, isFD := strings.CutPrefix(v, "fd:")
		if !ok || !isFD {
			continue
		}
		n, err := strconv.Atoi(fd)
		if err != nil {
			return nil
		}
		f := os.NewFile(uintptr(n), "channel")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil
		}
		return c
	}
	return nil
}

// hostile is the guest end of the channel as the abuse drives it.
type hostile struct {
	conn   net.Conn
	fr     *http2.Framer
	stream uint32 // the bridge's first request (its Ready call)
}

// abuse commits mode on conn until the host ends the channel (or the abuse
// is done, and then waits for that).
func abuse(mode string, conn net.Conn) {
	defer conn.Close()
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(conn, preface[:]); err != nil {
		return
	}
	if mode == "garbage" {
		buf := make([]byte, 64<<10)
		for i := 0; i < 4096; i++ { // up to 256 MiB
			rand.Read(buf)
			if _, err := conn.Write(buf); err != nil {
				return
			}
		}
		drain(conn)
		return
	}
	h := &hostile{conn: conn, fr: http2.NewFramer(conn, conn)}
	h.fr.AllowIllegalWrites = true
	if h.fr.WriteSettings() != nil {
		return
	}
	if mode == "noread" {
		// Never read again: the bridge's writes fill the channel.
		forever()
	}
	for h.stream == 0 {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return
		}
		if hf, ok := f.(*http2.HeadersFrame); ok {
			h.stream = hf.StreamID
		}
	}
	go drain(conn)
	switch mode {
	case "headers":
		h.endlessContinuation()
	case "window":
		for i := 0; i < 4; i++ {
			h.fr.WriteWindowUpdate(0, 1<<31-1)
		}
	case "datapastwindow":
		h.dataPastWindow()
	case "dataunopened":
		// DATA on a stream the host never opened: a connection error.
		h.fr.WriteData(h.stream+100, false, []byte("unasked"))
	case "floodforever":
		h.flood()
	case "slowloris":
		h.slowloris()
	}
	forever() // the host ends the channel, and PID 1 with it
}

// forever blocks until the process is killed. (An empty select would be a
// deadlock the runtime ends at once when nothing else runs.)
func forever() {
	for {
		time.Sleep(time.Hour)
	}
}

func drain(conn net.Conn) { io.Copy(io.Discard, conn) }

// endlessContinuation starts an answer whose header block never ends:
// 64 MiB of CONTINUATION frames without END_HEADERS.
func (h *hostile) endlessContinuation() {
	if h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.stream, BlockFragment: headerBlock(":status", "200")}) != nil {
		return
	}
	var pad []string
	for i := 0; i < 400; i++ {
		pad = append(pad, "x-pad", strings.Repeat("p", 32))
	}
	frag := headerBlock(pad...)
	for sent := 0; sent < 64<<20; sent += len(frag) {
		if h.fr.WriteContinuation(h.stream, false, frag) != nil {
			return
		}
	}
}

// dataPastWindow answers with 256 MiB of DATA, far past any window. The
// bridge may reset the stream (its answer is over the control service's
// bound) before the stream's window runs out: then the rest is discarded
// as it comes, and the channel goes on.
func (h *hostile) dataPastWindow() {
	if h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.stream, BlockFragment: headerBlock(":status", "200", "content-type", "application/proto"), EndHeaders: true}) != nil {
		return
	}
	chunk := make([]byte, 16<<10)
	for i := 0; i < 16384; i++ {
		if h.fr.WriteData(h.stream, false, chunk) != nil {
			return
		}
	}
}

// flood writes PING and SETTINGS frames, each of which the bridge must
// answer, until the channel ends.
func (h *hostile) flood() {
	for i := 0; ; i++ {
		if h.fr.WritePing(false, [8]byte{byte(i), byte(i >> 8), byte(i >> 16)}) != nil {
			return
		}
		if h.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(i)}) != nil {
			return
		}
	}
}

// slowloris trickles an answer's headers, a byte every 100 ms.
func (h *hostile) slowloris() {
	pr, pw := io.Pipe()
	go func() {
		fr := http2.NewFramer(pw, nil)
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.stream, BlockFragment: headerBlock(":status", "200", "x-slow", strings.Repeat("s", 4000)), EndHeaders: true})
		pw.Close()
	}()
	b := make([]byte, 1)
	for {
		if _, err := pr.Read(b); err != nil {
			return
		}
		if _, err := h.conn.Write(b); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// headerBlock is an HPACK block of the given fields.
func headerBlock(fields ...string) []byte {
	var b strings.Builder
	enc := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return []byte(b.String())
}
