package dnsgw

import (
	"net/netip"

	"golang.org/x/net/dns/dnsmessage"
)

// buildReply packs the reply to a query with header h: question q (when
// not nil), rcode, and one A or AAAA record per address under the question
// name with the given TTL. Addresses that would take the reply past
// MaxMessageSize are left out; buildReply returns the message and how many
// of addrs it holds. addrs must all be of q's type.
func buildReply(h dnsmessage.Header, q *dnsmessage.Question, rcode dnsmessage.RCode, ttl uint32, addrs []netip.Addr) ([]byte, int) {
	n := 0
	if q != nil {
		n = min(len(addrs), fitting(q))
	}
	for ; n >= 0; n-- {
		if msg, err := packReply(h, q, rcode, ttl, addrs[:n]); err == nil && len(msg) <= MaxMessageSize {
			return msg, n
		}
	}
	// Unreachable with a question that parsed (at most 259 bytes of
	// question and a 12-byte header); kept so a bug cannot drop the reply.
	msg, _ := packReply(h, nil, dnsmessage.RCodeServerFailure, 0, nil)
	return msg, 0
}

// fitting returns how many address records of q's type fit in a reply
// next to q, with the record names compressed to a pointer to q's name.
func fitting(q *dnsmessage.Question) int {
	rdata := 4
	if q.Type == dnsmessage.TypeAAAA {
		rdata = 16
	}
	const header, qfixed, rrfixed = 12, 4, 2 + 10 // name pointer, type, class, TTL, length
	room := MaxMessageSize - header - (int(q.Name.Length) + 1) - qfixed
	return max(0, room/(rrfixed+rdata))
}

func packReply(h dnsmessage.Header, q *dnsmessage.Question, rcode dnsmessage.RCode, ttl uint32, addrs []netip.Addr) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, MaxMessageSize), dnsmessage.Header{
		ID:                 h.ID,
		Response:           true,
		OpCode:             h.OpCode,
		RecursionDesired:   h.RecursionDesired,
		RecursionAvailable: true, // without it Go's resolver takes an empty NOERROR for a lame referral
		RCode:              rcode,
	})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if q != nil {
		if err := b.Question(*q); err != nil {
			return nil, err
		}
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: ttl}
		var err error
		if a.Is4() {
			err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		} else {
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
}
