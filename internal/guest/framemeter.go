package guest

import (
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/time/rate"
)

// MaxAnsweredFramesPerSecond bounds the PING and SETTINGS frames (not
// acknowledgements) the host reads from a guest per second: each makes the
// host write an acknowledgement, and a guest flooding them had its bridge
// spend a core answering (a neighbour's exec p99 was 15 times its idle
// p99). A real guest daemon sends one SETTINGS when the channel starts and
// no PING; past the rate the host reads the channel more slowly, so the
// flood waits in the guest's own socket, at the cost of the guest's own
// requests. Bursts of up to as many pass at once.
const MaxAnsweredFramesPerSecond = 100

// MaxControlFramesPerSecond bounds the other frames that carry no stream
// data (WINDOW_UPDATE, RST_STREAM, PRIORITY, GOAWAY, unknown types) read
// from a guest per second, likewise: a guest sends a WINDOW_UPDATE pair per
// 32 KiB it reads of an upload, a few thousand a second at the channel's
// fastest; a flood of them costs the host at most this many frames' work a
// second.
const MaxControlFramesPerSecond = 20_000

// frameMeter follows the frames in the byte stream read from the guest (the
// guest, the HTTP/2 server, sends no preface: its first byte begins a
// frame) and makes the reader wait when the guest sends control frames
// faster than their rates. It parses the 9-byte frame headers only, and
// skips the payloads.
type frameMeter struct {
	answered, control *rate.Limiter
	hdr               [9]byte
	nhdr              int    // bytes of hdr filled
	skip              uint32 // payload bytes left of the current frame
}

func newFrameMeter() *frameMeter {
	return &frameMeter{
		answered: rate.NewLimiter(MaxAnsweredFramesPerSecond, MaxAnsweredFramesPerSecond),
		control:  rate.NewLimiter(MaxControlFramesPerSecond, MaxControlFramesPerSecond),
	}
}

// observe reads b, the next bytes from the guest, and returns how long the
// reader must wait before passing them on.
func (m *frameMeter) observe(b []byte, now time.Time) time.Duration {
	answered, control := m.count(b)
	return max(delay(m.answered, answered, now), delay(m.control, control, now))
}

// count reads b, the next bytes from the guest, and returns how many
// control frames began in it: those that need an answer, and the others.
func (m *frameMeter) count(b []byte) (answered, control int) {
	for len(b) > 0 {
		if m.skip > 0 {
			k := min(uint32(len(b)), m.skip)
			m.skip -= k
			b = b[k:]
			continue
		}
		k := copy(m.hdr[m.nhdr:], b)
		m.nhdr += k
		b = b[k:]
		if m.nhdr < len(m.hdr) {
			break
		}
		m.nhdr = 0
		m.skip = uint32(m.hdr[0])<<16 | uint32(m.hdr[1])<<8 | uint32(m.hdr[2])
		ack := http2.Flags(m.hdr[4])&http2.FlagPingAck != 0 // FlagSettingsAck is the same bit
		switch http2.FrameType(m.hdr[3]) {
		case http2.FrameData, http2.FrameHeaders, http2.FrameContinuation:
		case http2.FramePing, http2.FrameSettings:
			if ack {
				control++
			} else {
				answered++
			}
		default:
			control++
		}
	}
	return answered, control
}

// delay takes n tokens of l and returns the wait they cost.
func delay(l *rate.Limiter, n int, now time.Time) time.Duration {
	if n == 0 {
		return 0
	}
	if n > l.Burst() {
		// More than a burst in one read: wait for the excess at the rate.
		extra := time.Duration(n-l.Burst()) * time.Second / time.Duration(l.Limit())
		return l.ReserveN(now, l.Burst()).DelayFrom(now) + extra
	}
	return l.ReserveN(now, n).DelayFrom(now)
}
