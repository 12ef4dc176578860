package gateway

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"testing/iotest"
	"time"
)

// helloConn captures what a TLS client writes; its reads end at once.
type helloConn struct{ bytes.Buffer }

func (c *helloConn) Read([]byte) (int, error)       { return 0, io.EOF }
func (*helloConn) Close() error                     { return nil }
func (*helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (*helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (*helloConn) SetDeadline(time.Time) error      { return nil }
func (*helloConn) SetReadDeadline(time.Time) error  { return nil }
func (*helloConn) SetWriteDeadline(time.Time) error { return nil }

// clientHello returns the records of a real ClientHello for sni.
func clientHello(t testing.TB, sni string) []byte {
	t.Helper()
	var c helloConn
	_ = tls.Client(&c, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	if c.Len() == 0 || c.Bytes()[0] != recordHandshake {
		t.Fatalf("no ClientHello written: %q", c.Bytes())
	}
	return c.Bytes()
}

// record builds one TLS record.
func record(typ byte, frag []byte) []byte {
	return append([]byte{typ, 3, 3, byte(len(frag) >> 8), byte(len(frag))}, frag...)
}

// helloMessage is the handshake message inside clientHello's records.
func helloMessage(t testing.TB, sni string) []byte {
	recs := clientHello(t, sni)
	var msg []byte
	for len(recs) > 0 {
		n := int(recs[3])<<8 | int(recs[4])
		msg = append(msg, recs[5:5+n]...)
		recs = recs[5+n:]
	}
	return msg
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestCopyTLSRecords: after the ClientHello a flow was decided on, the
// client's stream must stay TLS records, and no later plaintext
// ClientHello may name another SNI.
func TestCopyTLSRecords(t *testing.T) {
	first := clientHello(t, allowedHost)
	other := helloMessage(t, "other.test")
	same := helloMessage(t, allowedHost)
	ccs := record(recordCCS, []byte{1})
	app := record(recordAppData, bytes.Repeat([]byte{0xa5}, 300))
	cipher := record(recordHandshake, append([]byte{0x01, 0x00, 0x00, 0x10}, bytes.Repeat([]byte{0x5a}, 40)...))
	cases := []struct {
		name    string
		in      []byte
		forward []byte // nil with reason "": all of in
		reason  string
		detail  string
	}{
		{"a handshake and application data", cat(first, record(recordHandshake, []byte{16, 0, 0, 2, 0xaa, 0xbb}), ccs, cipher, app, app), nil, "", ""},
		{"a second ClientHello with the same SNI (HelloRetryRequest)", cat(first, ccs, record(recordHandshake, same), app), nil, "", ""},
		{"a second plaintext ClientHello with another SNI", cat(first, record(recordHandshake, other)), first, ReasonSNI, "other.test"},
		{"another SNI fragmented over two records", cat(first, record(recordHandshake, other[:10]), record(recordHandshake, other[10:])), cat(first, record(recordHandshake, other[:10])), ReasonSNI, "other.test"},
		{"another SNI in the same record as a message before it", cat(first, record(recordHandshake, cat([]byte{16, 0, 0, 1, 9}, other))), first, ReasonSNI, "other.test"},
		{"another SNI after ChangeCipherSpec", cat(first, ccs, record(recordHandshake, other)), cat(first, ccs), ReasonSNI, "other.test"},
		{"another SNI after application data", cat(first, app, record(recordHandshake, other)), cat(first, app), ReasonSNI, "other.test"},
		{"a plaintext ClientHello that does not parse", cat(first, record(recordHandshake, []byte{1, 0, 0, 4, 3, 3, 0, 0})), first, ReasonTLSRecord, "ClientHello"},
		{"plain HTTP after the ClientHello", cat(first, []byte(get("other.test"))), first, ReasonTLSRecord, "not TLS"},
		{"a heartbeat record", cat(first, record(24, []byte{1, 0, 16})), first, ReasonTLSRecord, "not TLS"},
		{"SSL 2 version", cat(first, []byte{23, 2, 0, 0, 1, 0}), first, ReasonTLSRecord, "not TLS"},
		{"an overlong record", cat(first, []byte{23, 3, 3, 0x48, 0x01}), first, ReasonTLSRecord, "not TLS"},
		{"an empty handshake record", cat(first, record(recordHandshake, nil)), first, ReasonTLSRecord, "empty"},
		{"a ClientHello over the bound", cat(first, record(recordHandshake, []byte{1, 0x01, 0, 0})), first, ReasonTLSRecord, "bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := c.forward
			if c.reason == "" {
				want = c.in
			}
			for _, r := range []struct {
				name string
				r    io.Reader
			}{{"whole", bytes.NewReader(c.in)}, {"byte by byte", iotest.OneByteReader(bytes.NewReader(c.in))}} {
				var out bytes.Buffer
				err := copyTLSRecords(&out, r.r, allowedHost)
				if !bytes.Equal(out.Bytes(), want) {
					t.Errorf("%s: forwarded %d bytes, want %d", r.name, out.Len(), len(want))
				}
				checkRefusal(t, r.name, err, c.reason, c.detail)
			}
		})
	}
}

// FuzzCopyTLSRecords: after a real ClientHello, whatever follows, the bytes
// forwarded are a prefix of the input made of whole records.
func FuzzCopyTLSRecords(f *testing.F) {
	first := clientHello(f, allowedHost)
	other := helloMessage(f, "other.test")
	f.Add(record(recordHandshake, other))
	f.Add(cat(record(recordCCS, []byte{1}), record(recordHandshake, other)))
	f.Add(record(recordAppData, []byte("x")))
	f.Fuzz(func(t *testing.T, tail []byte) {
		in := cat(first, tail)
		var out bytes.Buffer
		err := copyTLSRecords(&out, bytes.NewReader(in), allowedHost)
		if !bytes.HasPrefix(in, out.Bytes()) || out.Len() < len(first) {
			t.Fatalf("forwarded %d bytes, not a prefix of the input holding the first ClientHello", out.Len())
		}
		if errors.Is(err, io.EOF) && out.Len() != len(in) {
			t.Fatalf("accepted to the end but forwarded %d of %d bytes", out.Len(), len(in))
		}
		for b := out.Bytes(); len(b) > 0; {
			if len(b) < tlsHeader || len(b) < tlsHeader+(int(b[3])<<8|int(b[4])) {
				t.Fatalf("forwarded a partial record")
			}
			b = b[tlsHeader+(int(b[3])<<8|int(b[4])):]
		}
	})
}
