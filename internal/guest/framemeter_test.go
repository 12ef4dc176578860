package guest

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"
)

// frames is a valid frame sequence as a guest writes it: SETTINGS, a PING,
// a WINDOW_UPDATE, HEADERS, DATA and the acknowledgements.
func frames(t testing.TB) []byte {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(fr.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 20}))
	must(fr.WritePing(false, [8]byte{1}))
	must(fr.WriteWindowUpdate(0, 1<<16))
	must(fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x88}, EndHeaders: true}))
	must(fr.WriteData(1, false, bytes.Repeat([]byte{6}, 300))) // a payload byte that looks like a PING type
	must(fr.WriteSettingsAck())
	must(fr.WritePing(true, [8]byte{2}))
	return b.Bytes()
}

// TestFrameMeterCounts: the meter tells the frames that need an answer
// (PING, SETTINGS) from the other control frames and from stream data.
func TestFrameMeterCounts(t *testing.T) {
	answered, control := (&frameMeter{}).count(frames(t))
	if answered != 2 || control != 3 {
		t.Errorf("count = %d answered, %d other control frames; want 2 (SETTINGS, PING) and 3 (WINDOW_UPDATE, two ACKs)", answered, control)
	}
}

// FuzzFrameMeter: whatever the guest writes, however the reads split it,
// the meter neither panics nor counts differently: frame boundaries are
// followed across reads.
func FuzzFrameMeter(f *testing.F) {
	f.Add(frames(f), 7)
	f.Add([]byte{0, 0, 8, 6, 0, 0, 0, 0, 0}, 3)
	f.Add(bytes.Repeat([]byte{0xff}, 40), 1)
	f.Fuzz(func(t *testing.T, b []byte, split int) {
		wa, wc := (&frameMeter{}).count(b)
		if len(b) == 0 {
			return
		}
		split = (split%len(b) + len(b)) % len(b)
		m := &frameMeter{}
		a1, c1 := m.count(b[:split])
		a2, c2 := m.count(b[split:])
		if a1+a2 != wa || c1+c2 != wc {
			t.Errorf("split at %d: %d+%d answered, %d+%d control; whole: %d, %d", split, a1, a2, c1, c2, wa, wc)
		}
	})
}
