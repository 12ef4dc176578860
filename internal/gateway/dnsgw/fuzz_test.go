package dnsgw

import (
	"context"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func FuzzAnswer(f *testing.F) {
	f.Add(query(f, 1, "example.com.", dnsmessage.TypeA))
	f.Add(query(f, 2, "EXAMPLE.com.", dnsmessage.TypeAAAA))
	f.Add(query(f, 3, "missing.example.com.", dnsmessage.TypeA))
	f.Add(query(f, 4, "example.com.", dnsmessage.TypeTXT))
	f.Add(query(f, 5, "evil.example.com.", dnsmessage.TypeA))
	f.Add(queryWith(f, dnsmessage.Header{ID: 6, OpCode: 5}, "example.com.", dnsmessage.TypeA, dnsmessage.ClassINET))
	f.Add([]byte{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1})
	f.Add([]byte{0, 8, 1, 0, 0, 2, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0, 9})
	f.Fuzz(func(t *testing.T, msg []byte) {
		e := newTestEnv(t, nil)
		r := e.srv.Answer(context.Background(), msg)
		if r == nil {
			return
		}
		if len(msg) < 2 {
			t.Fatalf("reply to a %d-byte message", len(msg))
		}
		if len(r) > MaxMessageSize {
			t.Fatalf("reply is %d bytes", len(r))
		}
		var m dnsmessage.Message
		if err := m.Unpack(r); err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		if id := uint16(msg[0])<<8 | uint16(msg[1]); m.ID != id || !m.Response {
			t.Fatalf("reply ID %d response %v, want ID %d and QR", m.ID, m.Response, id)
		}
	})
}
