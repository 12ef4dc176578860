package gateway

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
)

// FuzzStreamFrames feeds the link's framing (QEMU's -netdev stream: a
// 4-byte big-endian length before each frame) with what a hostile guest's
// VMM could write (catalogue A-1): every frame read is within the buffer and
// maxFrame, a bad length ends the link with an error instead of a huge
// allocation or a panic, and frames written well come back byte for byte.
func FuzzStreamFrames(f *testing.F) {
	frame := func(b []byte) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	}
	f.Add(frame([]byte("\xff\xff\xff\xff\xff\xff\x02\x00\x00\x00\x00\x01\x08\x06")), 1)
	f.Add(append(frame([]byte("a")), frame(bytes.Repeat([]byte("b"), 1500))...), 2)
	f.Add([]byte("\x00\x00\x00\x00"), 1)
	f.Add([]byte("\xff\xff\xff\xff"), 1)
	f.Add([]byte("\x00\x00\x05\xdc short"), 1)
	f.Fuzz(func(t *testing.T, data []byte, split int) {
		buf := make([]byte, maxFrame)
		s := &streamIO{r: bufio.NewReader(bytes.NewReader(data))}
		for {
			fr, err := s.ReadFrame(buf)
			if err != nil {
				break
			}
			if len(fr) == 0 || len(fr) > maxFrame {
				t.Fatalf("frame of %d bytes read", len(fr))
			}
		}
		// Well-formed frames (data cut in two at split) round-trip.
		if len(data) == 0 || len(data) > 2*maxFrame {
			return
		}
		cut := 1 + (split%len(data)+len(data))%len(data)
		parts := [][]byte{data[:cut], data[cut:]}
		var stream []byte
		for _, p := range parts {
			if len(p) > 0 && len(p) <= maxFrame {
				stream = append(stream, frame(p)...)
			}
		}
		s = &streamIO{r: bufio.NewReader(bytes.NewReader(stream))}
		for _, p := range parts {
			if len(p) == 0 || len(p) > maxFrame {
				continue
			}
			got, err := s.ReadFrame(buf)
			if err != nil || !bytes.Equal(got, p) {
				t.Fatalf("frame %q came back as %q, %v", p, got, err)
			}
		}
		if _, err := s.ReadFrame(buf); err == nil {
			t.Fatal("a frame read past the end of the stream")
		}
	})
}

// TestStreamFrameLengthGuard: a guest's VMM declaring a frame longer than
// the link's MTU allows — 4 GiB with 10 bytes behind it, or only a little
// over maxFrame — ends the link with "framing lost" before anything is
// read or allocated for it (catalogue A-2), even when the caller's buffer
// could hold more.
func TestStreamFrameLengthGuard(t *testing.T) {
	for _, n := range []uint32{0xffffffff, 1 << 31, maxFrame + 1, 0} {
		in := append(binary.BigEndian.AppendUint32(nil, n), bytes.Repeat([]byte{'x'}, maxFrame+16)...)
		s := &streamIO{r: bufio.NewReader(bytes.NewReader(in))}
		buf := make([]byte, 64<<10)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		fr, err := s.ReadFrame(buf)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "framing lost") {
			t.Errorf("a frame declared %d bytes long: read %d bytes, err %v; want framing lost", n, len(fr), err)
		}
		if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<20 {
			t.Errorf("a frame declared %d bytes long allocated %d bytes", n, grown)
		}
	}
	// The longest frame allowed still passes.
	in := append(binary.BigEndian.AppendUint32(nil, maxFrame), bytes.Repeat([]byte{'x'}, maxFrame)...)
	s := &streamIO{r: bufio.NewReader(bytes.NewReader(in))}
	if fr, err := s.ReadFrame(make([]byte, maxFrame)); err != nil || len(fr) != maxFrame {
		t.Errorf("a frame of maxFrame bytes: %d bytes, %v", len(fr), err)
	}
}
