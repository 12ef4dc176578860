package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// A spliced TLS flow is decided by the SNI of its first ClientHello, so the
// client's record stream is followed for the rest of the flow: every
// record must be a TLS record (a known content type, version 3.x, a length
// TLS allows), and every ClientHello the client sends in plaintext (a TLS
// 1.3 client answering a HelloRetryRequest sends a second one; a hostile
// one could send its own before the server answers) must name the same
// SNI. Before the client's ChangeCipherSpec its handshake records are
// plaintext and are parsed strictly, message by message; after it they are
// ciphertext (TLS 1.2), except a TLS 1.3 client's second ClientHello after
// a HelloRetryRequest, so a handshake record then is checked when it holds
// one whole ClientHello and passed as ciphertext otherwise. Renegotiation
// inside the encrypted channel is out of the gateway's sight.

// ReasonTLSRecord counts flows closed because their client's bytes stopped
// being TLS records.
const ReasonTLSRecord = "bad_tls_record"

// TLS record bounds (RFC 5246 §6.2.3: ciphertext may be 2^14+2048 bytes).
const (
	tlsHeader    = 5
	maxTLSRecord = 1<<14 + 2048

	recordCCS       = 20
	recordAlert     = 21
	recordHandshake = 22
	recordAppData   = 23

	msgClientHello = 1
)

// tlsStream is the state of one client→upstream TLS record stream.
type tlsStream struct {
	sni       string // the first ClientHello's
	afterCCS  bool   // the client sent ChangeCipherSpec
	hdr       []byte // a plaintext handshake message header being read
	skip      int    // body bytes of a plaintext non-ClientHello message to pass
	hello     []byte // a plaintext ClientHello being collected (header included)
	helloNeed int    // its whole length
}

// step decides one whole record at p's start: it returns its length, or 0
// while the record is incomplete.
func (s *tlsStream) step(p []byte) (int, error) {
	if len(p) < tlsHeader {
		return 0, nil
	}
	typ, major, minor := p[0], p[1], p[2]
	n := int(p[3])<<8 | int(p[4])
	if typ < recordCCS || typ > recordAppData || major != 3 || minor > 4 || n > maxTLSRecord {
		return 0, &flowRefusal{ReasonTLSRecord, fmt.Sprintf("record header % x is not TLS", p[:tlsHeader])}
	}
	if len(p) < tlsHeader+n {
		return 0, nil
	}
	frag := p[tlsHeader : tlsHeader+n]
	switch typ {
	case recordCCS:
		s.afterCCS = true
	case recordHandshake:
		if n == 0 {
			return 0, &flowRefusal{ReasonTLSRecord, "empty handshake record"}
		}
		var err error
		if s.afterCCS {
			err = s.laterHello(frag)
		} else {
			err = s.plaintext(frag)
		}
		if err != nil {
			return 0, err
		}
	}
	return tlsHeader + n, nil
}

// plaintext follows handshake messages across plaintext records, checking
// every ClientHello.
func (s *tlsStream) plaintext(frag []byte) error {
	for len(frag) > 0 {
		switch {
		case s.skip > 0:
			k := min(s.skip, len(frag))
			s.skip -= k
			frag = frag[k:]
		case s.hello != nil:
			k := min(s.helloNeed-len(s.hello), len(frag))
			s.hello = append(s.hello, frag[:k]...)
			frag = frag[k:]
			if len(s.hello) == s.helloNeed {
				msg := s.hello
				s.hello = nil
				if err := s.checkHello(msg, true); err != nil {
					return err
				}
			}
		default:
			k := min(4-len(s.hdr), len(frag))
			s.hdr = append(s.hdr, frag[:k]...)
			frag = frag[k:]
			if len(s.hdr) < 4 {
				continue
			}
			body := int(s.hdr[1])<<16 | int(s.hdr[2])<<8 | int(s.hdr[3])
			if s.hdr[0] == msgClientHello {
				if body+4 > maxSniff {
					return &flowRefusal{ReasonTLSRecord, fmt.Sprintf("ClientHello of %d bytes", body)}
				}
				s.hello, s.helloNeed = append(make([]byte, 0, body+4), s.hdr...), body+4
			} else {
				s.skip = body
			}
			s.hdr = s.hdr[:0]
		}
	}
	return nil
}

// laterHello checks a handshake record after ChangeCipherSpec that holds one
// whole ClientHello; any other is ciphertext.
func (s *tlsStream) laterHello(frag []byte) error {
	if len(frag) < 4 || frag[0] != msgClientHello || int(frag[1])<<16|int(frag[2])<<8|int(frag[3]) != len(frag)-4 {
		return nil
	}
	return s.checkHello(frag, false)
}

// checkHello parses a ClientHello message with crypto/tls; its SNI must be
// the first one's. must says whether a message that does not parse is
// refused (plaintext) or passed (possibly ciphertext).
func (s *tlsStream) checkHello(msg []byte, must bool) error {
	sni, err := helloSNI(msg)
	switch {
	case err != nil && must:
		return &flowRefusal{ReasonTLSRecord, fmt.Sprintf("a later ClientHello: %v", err)}
	case err != nil:
		return nil
	case sni != s.sni:
		return &flowRefusal{ReasonSNI, fmt.Sprintf("a later ClientHello names %.80q; the flow was decided for SNI %.80q", sni, s.sni)}
	}
	return nil
}

// helloSNI wraps a ClientHello message in records and reads its SNI as
// sniff does.
func helloSNI(msg []byte) (string, error) {
	var recs bytes.Buffer
	for len(msg) > 0 {
		k := min(len(msg), 1<<14)
		recs.Write([]byte{recordHandshake, 3, 1, byte(k >> 8), byte(k)})
		recs.Write(msg[:k])
		msg = msg[k:]
	}
	return clientHelloSNI(&recorder{r: &recs, limit: recs.Len()})
}

// copyTLSRecords copies src to dst record by record (tlsStream), whole
// records only, exactly as read; the first refusal ends it with its
// *flowRefusal.
func copyTLSRecords(dst io.Writer, src io.Reader, sni string) error {
	s := &tlsStream{sni: sni}
	return copyDecided(dst, bufio.NewReaderSize(src, maxHead), s.advance)
}

// advance decides the whole records at p's start.
func (s *tlsStream) advance(p []byte) (n int, err error) {
	for n < len(p) {
		k, err := s.step(p[n:])
		if err != nil || k == 0 {
			return n, err
		}
		n += k
	}
	return n, nil
}
