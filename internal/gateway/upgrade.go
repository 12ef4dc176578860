package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

// A plaintext WebSocket upgrade is let through on a flow's first request
// only. The flow turns opaque (WebSocket frames, to the host the upgrade
// named and the policy allowed) only once the upstream answers 101: an
// upgrade the upstream ignores leaves an HTTP flow, whose next requests are
// decided as usual, so the guest→upstream direction forwards nothing past
// the upgrade request until the answer is known. Only the upstream's first
// response head (after any 1xx interim ones) is read for it: the first
// request is the upgrade, so the first final response is its answer.

// errAwaitUpgrade stops the request copy after a WebSocket upgrade request
// was forwarded.
var errAwaitUpgrade = errors.New("waiting for the upstream's answer to an upgrade")

// upgradeGate carries what the two directions of one HTTP flow must agree
// on about a first-request upgrade.
type upgradeGate struct {
	once    sync.Once
	decided chan struct{} // closed once the first request head is decided
	upgrade bool          // that head is an allowed WebSocket upgrade; set before decided closes
	verdict chan bool     // the response side's answer: true on 101
}

func newUpgradeGate() *upgradeGate {
	return &upgradeGate{decided: make(chan struct{}), verdict: make(chan bool, 1)}
}

// decide records whether the first request is an upgrade; later calls do
// nothing.
func (g *upgradeGate) decide(upgrade bool) {
	g.once.Do(func() {
		g.upgrade = upgrade
		close(g.decided)
	})
}

// switched waits for the upstream's answer to the upgrade: true when it
// switched protocols.
func (g *upgradeGate) switched() bool { return <-g.verdict }

// copyResponses copies the upstream's bytes to the client; when the first
// request was an upgrade it reads the first response heads on the way to
// give the request side its verdict. Bytes are forwarded exactly as read.
func (g *upgradeGate) copyResponses(dst io.Writer, src io.Reader) error {
	<-g.decided
	if !g.upgrade {
		_, err := io.Copy(dst, src)
		return err
	}
	br := bufio.NewReaderSize(src, maxHead)
	answered := false
	defer func() {
		if !answered {
			g.verdict <- false
		}
	}()
	for !answered {
		head, err := responseHead(br)
		if len(head) > 0 {
			if _, werr := dst.Write(head); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
		code := statusCode(head)
		switch {
		case code == 101:
			g.verdict <- true
			answered = true
		case code >= 100 && code < 200:
		default:
			g.verdict <- false
			answered = true
		}
	}
	_, err := br.WriteTo(dst)
	return err
}

// responseHead reads one response head, through its empty line, of at most
// maxHead bytes.
func responseHead(br *bufio.Reader) ([]byte, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		if len(head)+len(line) > maxHead {
			return nil, errors.New("response head too long")
		}
		head = append(head, line...)
		if err != nil {
			return head, err
		}
		if (string(line) == "\r\n" || string(line) == "\n") && len(head) > len(line) {
			return head, nil
		}
	}
}

// statusCode is a response head's status code, 0 when it has none.
func statusCode(head []byte) int {
	v, rest, ok := bytes.Cut(head, []byte(" "))
	if !ok || !bytes.HasPrefix(v, []byte("HTTP/1.")) || len(rest) < 3 {
		return 0
	}
	code := 0
	for _, c := range rest[:3] {
		if c < '0' || c > '9' {
			return 0
		}
		code = code*10 + int(c-'0')
	}
	return code
}
