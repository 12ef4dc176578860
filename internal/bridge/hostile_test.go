package bridge

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/spacesandbox/space/internal/guest"
)

// fakeGuest is the guest end of a bridge's channel, driven by a test: it
// plays the HTTP/2 server the bridge expects — or breaks it.
type fakeGuest struct {
	conn net.Conn
	fr   *http2.Framer
	// stream is the id of the bridge's first request (its Ready call).
	stream uint32
	// sent counts the frames or bytes the guest wrote.
	sent atomic.Int64
}

// greet reads the bridge's preface, writes the server's SETTINGS and reads
// frames up to the bridge's first request; then the bridge's later writes
// are drained, so that only the guest's writes are the abuse.
func greet(t *testing.T, conn net.Conn) *fakeGuest {
	t.Helper()
	g := &fakeGuest{conn: conn, fr: http2.NewFramer(conn, conn)}
	g.fr.AllowIllegalWrites = true
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	var preface [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(conn, preface[:]); err != nil || string(preface[:]) != http2.ClientPreface {
		t.Fatalf("bridge preface %q, %v", preface, err)
	}
	if err := g.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for g.stream == 0 {
		f, err := g.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the bridge's first request: %v", err)
		}
		if h, ok := f.(*http2.HeadersFrame); ok {
			g.stream = h.StreamID
		}
	}
	conn.SetDeadline(time.Time{})
	go io.Copy(io.Discard, conn)
	return g
}

// headerBlock is an HPACK block of the given fields.
func headerBlock(fields ...string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return b.Bytes()
}

// usage is what the process holds and has spent: heap in use after a
// collection, goroutines, and CPU time (user+system).
type usage struct {
	heap       uint64
	alloc      uint64
	goroutines int
	cpu        time.Duration
}

func measure() usage {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return usage{heap: ms.HeapInuse, alloc: ms.TotalAlloc, goroutines: runtime.NumGoroutine(),
		cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
}

// peakHeap samples the heap in use until stop is closed and returns the
// highest value seen.
func peakHeap(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return out
}

// Bounds of one abusive guest on its bridge: what the bridge may hold
// while the guest abuses it (the guest writes hundreds of MiB or hundreds
// of thousands of frames), and the CPU the bridge may spend per small frame
// the guest floods it with (under -race too) —
// far above what an HTTP/2 frame costs, far below what a queue scanned per
// frame or a buffer copied per frame would cost once there are millions.
const (
	hostileHeapBound   = 48 << 20
	hostileCPUPerFrame = 200 * time.Microsecond
)

// TestHostileGuest (catalogue ): a guest speaking garbage,
// HTTP/2 protocol violations, headers without end, flow-control abuse,
// floods of SETTINGS and PING, or trickling its answer, gets from its
// bridge bounded memory, CPU per frame and goroutines, and either its
// channel ended (a protocol error) or nothing it asked for; another
// sandbox's bridge, on a real guest daemon, keeps answering through its
// own channel all along.
func TestHostileGuest(t *testing.T) {
	raw, _, _ := startBridge(t)
	neighbour, _, _ := admitted(t, raw)
	neighbourAnswers := func(t *testing.T, when string) {
		t.Helper()
		if code, body := getEnvs(t, neighbour); code != http.StatusOK || !strings.Contains(body, "FROM_INIT") {
			t.Errorf("%s, the neighbour's bridge answered /envs with HTTP %d %q", when, code, body)
		}
	}
	neighbourAnswers(t, "before the abuse")
	baseGoroutines := measure().goroutines

	// Built before any measurement: the test's own allocations are not the
	// bridge's.
	hugeBlock := headerBlock(":status", "200", "content-type", "application/proto", "x-huge", strings.Repeat("h", 8<<20))

	// ends says the abuse must end the channel; otherwise the bridge must
	// not believe the guest ready.
	// cpu, when set, is checked per frame: floods of small frames, where
	// the bridge's work per frame is the whole cost.
	for _, tc := range []struct {
		name  string
		ends  bool
		cpu   bool
		abuse func(t *testing.T, g *fakeGuest)
	}{
		{"Garbage", true, false, func(t *testing.T, g *fakeGuest) {
			buf := make([]byte, 64<<10)
			for i := 0; i < 4096; i++ { // up to 256 MiB
				rand.Read(buf)
				if _, err := g.conn.Write(buf); err != nil {
					return
				}
				g.sent.Add(1)
			}
		}},
		// A header block that never ends: CONTINUATION frames without
		// END_HEADERS, 64 MiB of them, each full of header fields.
		{"EndlessContinuation", true, false, func(t *testing.T, g *fakeGuest) {
			block := headerBlock(":status", "200")
			if g.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: g.stream, BlockFragment: block}) != nil {
				return
			}
			var pad []string
			for i := 0; i < 400; i++ {
				pad = append(pad, "x-pad", strings.Repeat("p", 32))
			}
			frag := headerBlock(pad...)
			for sent := 0; sent < 64<<20; sent += len(frag) {
				if g.fr.WriteContinuation(g.stream, false, frag) != nil {
					return
				}
				g.sent.Add(1)
			}
		}},
		// One header field of 8 MiB: over the client's header list bound
		// (1 MiB), under the HTTP/2 library's default (10 MiB). The answer
		// must not be believed.
		{"HugeHeader", true, false, func(t *testing.T, g *fakeGuest) {
			block := hugeBlock
			first := true
			for len(block) > 0 {
				n := min(len(block), 16<<10)
				var err error
				if first {
					err = g.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: g.stream, BlockFragment: block[:n], EndHeaders: n == len(block)})
				} else {
					err = g.fr.WriteContinuation(g.stream, n == len(block), block[:n])
				}
				if err != nil {
					return
				}
				first = false
				block = block[n:]
				g.sent.Add(1)
			}
			g.fr.WriteData(g.stream, true, []byte{0x0a, 0x01, 'v'})
			g.sent.Add(1)
		}},
		{"WindowUpdateZero", true, false, func(t *testing.T, g *fakeGuest) {
			g.fr.WriteWindowUpdate(0, 0)
			g.sent.Add(1)
		}},
		{"WindowUpdateOverflow", true, false, func(t *testing.T, g *fakeGuest) {
			for i := 0; i < 4; i++ {
				if g.fr.WriteWindowUpdate(0, 1<<31-1) != nil {
					return
				}
				g.sent.Add(1)
			}
		}},
		// DATA far past the window the bridge granted: the bridge must
		// not buffer it. Whether the channel ends depends on whether the
		// bridge had reset the stream (its answer is over
		// guest.MaxControlAnswerBytes) before the stream's window ran out.
		{"DataPastWindow", false, false, func(t *testing.T, g *fakeGuest) {
			if g.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: g.stream, BlockFragment: headerBlock(":status", "200", "content-type", "application/proto"), EndHeaders: true}) != nil {
				return
			}
			chunk := make([]byte, 16<<10)
			for i := 0; i < 16384; i++ { // 256 MiB
				if g.fr.WriteData(g.stream, false, chunk) != nil {
					return
				}
				g.sent.Add(1)
			}
		}},
		{"PushPromise", true, false, func(t *testing.T, g *fakeGuest) {
			g.fr.WritePushPromise(http2.PushPromiseParam{StreamID: g.stream, PromiseID: 2, BlockFragment: headerBlock(":method", "GET", ":path", "/", ":scheme", "http", ":authority", "guest"), EndHeaders: true})
			g.sent.Add(1)
		}},
		{"SettingsFlood", false, true, func(t *testing.T, g *fakeGuest) {
			// The bridge reads these at guest.MaxAnsweredFramesPerSecond:
			// the flood stops when the channel is full for a while.
			g.conn.SetWriteDeadline(time.Now().Add(3 * time.Second))
			defer g.conn.SetWriteDeadline(time.Time{})
			for i := 0; i < 200_000; i++ {
				if g.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(i)}) != nil {
					return
				}
				g.sent.Add(1)
			}
		}},
		{"PingFlood", false, true, func(t *testing.T, g *fakeGuest) {
			// The bridge reads these at guest.MaxAnsweredFramesPerSecond:
			// the flood stops when the channel is full for a while.
			g.conn.SetWriteDeadline(time.Now().Add(3 * time.Second))
			defer g.conn.SetWriteDeadline(time.Time{})
			for i := 0; i < 200_000; i++ {
				if g.fr.WritePing(false, [8]byte{byte(i), byte(i >> 8), byte(i >> 16)}) != nil {
					return
				}
				g.sent.Add(1)
			}
		}},
		// Slowloris: the answer's headers, a byte every 20 ms. The bridge
		// gives up on the guest after its ready timeout and holds no more
		// for it than for a silent one.
		{"Slowloris", false, false, func(t *testing.T, g *fakeGuest) {
			var b bytes.Buffer
			fr := http2.NewFramer(&b, nil)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: g.stream, BlockFragment: headerBlock(":status", "200", "content-type", "application/proto", "x-slow", strings.Repeat("s", 200)), EndHeaders: true})
			for _, c := range b.Bytes()[:100] {
				if _, err := g.conn.Write([]byte{c}); err != nil {
					return
				}
				g.sent.Add(1)
				time.Sleep(20 * time.Millisecond)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := measure()
			guestConn, status, exitFile := hostileGuest(t, 1500*time.Millisecond)
			g := greet(t, guestConn)
			stop := make(chan struct{})
			peak := peakHeap(stop)
			tc.abuse(t, g)
			st, done := status()
			if tc.ends {
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatalf("the bridge still serves a guest that did %s: %+v", tc.name, st)
				}
				checkProtocolErrorCounted(t, tc.name, exitFile)
			} else if st.Ready {
				t.Fatalf("the bridge believes a guest that did %s ready: %+v", tc.name, st)
			}
			if tc.name == "Slowloris" && !strings.Contains(st.Reason, "did not answer") {
				t.Errorf("a trickling guest is not reported: %+v", st)
			}
			close(stop)
			after := measure()
			grown := int64(<-peak) - int64(before.heap)
			if grown > hostileHeapBound {
				t.Errorf("the heap grew by %d MiB while the guest did %s (bound %d MiB)", grown>>20, tc.name, hostileHeapBound>>20)
			}
			// What was allocated bounds what was held at any moment,
			// which sampling alone could miss (the test's own writes
			// are counted too).
			if alloc := after.alloc - before.alloc; alloc > hostileHeapBound {
				t.Errorf("%d MiB allocated while the guest did %s (bound %d MiB)", alloc>>20, tc.name, hostileHeapBound>>20)
			}
			if n := g.sent.Load(); n > 1000 {
				if per := (after.cpu - before.cpu) / time.Duration(n); tc.cpu && per > hostileCPUPerFrame {
					t.Errorf("%s cost %v of CPU per frame over %d frames (bound %v)", tc.name, per, n, hostileCPUPerFrame)
				}
				t.Logf("%s: %d writes, %v CPU each, heap peak +%d KiB, %d KiB allocated", tc.name, n, (after.cpu-before.cpu)/time.Duration(n), grown>>10, (after.alloc-before.alloc)>>10)
			}
			neighbourAnswers(t, "after a guest did "+tc.name)
		})
		// The abusive bridge is gone, and its goroutines with it: no
		// more run than before it started (the neighbour's are still up).
		var n int
		for i := 0; i < 200; i++ {
			if n = measure().goroutines; n <= baseGoroutines+2 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n > baseGoroutines+2 {
			t.Errorf("%d goroutines left after the bridge of a guest that did %s stopped, %d before", n, tc.name, baseGoroutines)
		}
	}
}

// checkProtocolErrorCounted (catalogue A-1): a guest whose abuse ended its
// channel has the channel's end recorded as a protocol error — in the
// bridge's exit reason, which becomes its sandbox's event, and by kind in
// the errors file the node adds to its counter.
func checkProtocolErrorCounted(t *testing.T, abuse, exitFile string) {
	t.Helper()
	var reason []byte
	for i := 0; i < 100 && len(reason) == 0; i++ { // written as Run returns
		reason, _ = os.ReadFile(exitFile)
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(string(reason), guest.ErrProtocol.Error()) {
		t.Errorf("a guest that did %s: the bridge's exit reason is %q, want it to name a %q", abuse, reason, guest.ErrProtocol)
	}
	counts, err := ReadProtocolErrors(filepath.Join(filepath.Dir(exitFile), ProtocolErrorsFile))
	var total uint64
	for _, n := range counts {
		total += n
	}
	if err != nil || total == 0 {
		t.Errorf("a guest that did %s: protocol errors counted %v (%v), want at least one", abuse, counts, err)
	}
}
