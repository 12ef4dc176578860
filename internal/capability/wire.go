package capability

import (
	"encoding/binary"
	"fmt"
	"time"
)

func encode(c *Capability) ([]byte, error) {
	b := []byte{Version}
	for _, s := range []string{c.KeyID, c.Sandbox, c.Node, c.Substrate, c.Activation, c.PodUID} {
		if len(s) > MaxFieldBytes {
			return nil, fmt.Errorf("capability: field of %d bytes is over %d", len(s), MaxFieldBytes)
		}
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, c.Generation)
	b = binary.AppendUvarint(b, uint64(c.Ops))
	b = binary.AppendUvarint(b, uint64(c.Port))
	if len(c.Protocol) > MaxFieldBytes {
		return nil, fmt.Errorf("capability: protocol of %d bytes is over %d", len(c.Protocol), MaxFieldBytes)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Protocol)))
	b = append(b, c.Protocol...)
	b = binary.AppendUvarint(b, uint64(c.IssuedAt.Unix()))
	b = binary.AppendUvarint(b, uint64(c.ExpiresAt.Unix()))
	return b, nil
}

// reader consumes an untrusted message; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	// Only the minimal encoding: 0x80 0x00 is also 0 to binary.Uvarint,
	// and a token must have one byte form (catalogue E-7).
	if n <= 0 || n != uvarintLen(v) {
		r.err = ErrMalformed
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str() string {
	n := r.uvarint()
	if r.err != nil {
		return ""
	}
	if n > MaxFieldBytes || n > uint64(len(r.b)) {
		r.err = ErrMalformed
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func decode(msg []byte) (*Capability, error) {
	if len(msg) == 0 || msg[0] != Version {
		return nil, fmt.Errorf("%w: unknown version", ErrMalformed)
	}
	r := &reader{b: msg[1:]}
	c := &Capability{}
	c.KeyID, c.Sandbox, c.Node, c.Substrate, c.Activation, c.PodUID = r.str(), r.str(), r.str(), r.str(), r.str(), r.str()
	c.Generation = r.uvarint()
	ops := r.uvarint()
	port := r.uvarint()
	c.Protocol = r.str()
	iat, exp := r.uvarint(), r.uvarint()
	if r.err != nil || len(r.b) != 0 {
		return nil, ErrMalformed
	}
	if ops > uint64(^uint32(0)) || !Op(ops).Valid() || port > 65535 || iat > 1<<40 || exp > 1<<40 {
		return nil, ErrMalformed
	}
	c.Ops, c.Port = Op(ops), uint16(port)
	c.IssuedAt, c.ExpiresAt = time.Unix(int64(iat), 0), time.Unix(int64(exp), 0)
	if c.KeyID == "" || c.Sandbox == "" {
		return nil, ErrMalformed
	}
	return c, nil
}

// uvarintLen is the length of v's minimal uvarint encoding.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}
