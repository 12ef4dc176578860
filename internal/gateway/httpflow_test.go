package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
)

const allowedHost = "api.allowed.test"

// hostCheck is the gateway's check for a flow allowed for allowedHost.
func hostCheck(t testing.TB) func(string) error {
	p, err := egress.ParsePolicy([]byte(`{"allow_internet": false, "allow": {"domains": ["` + allowedHost + `"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	return func(host string) error {
		if d := p.CheckHost(allowedHost, host); !d.Allow {
			return &flowRefusal{ReasonHost, d.Reason}
		}
		return nil
	}
}

func get(host string) string { return "GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n" }

// TestCopyRequests: every request on a stream is decided; what is
// forwarded is exactly the bytes before the first refused request.
func TestCopyRequests(t *testing.T) {
	ok := get(allowedHost)
	post := "POST /up HTTP/1.1\r\nHost: " + allowedHost + "\r\nContent-Length: 11\r\n\r\nhello world"
	chunked := "POST /c HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5;ext=1\r\nhello\r\n1A\r\n" + strings.Repeat("x", 26) + "\r\n0\r\nX-Sum: 1\r\n\r\n"
	// A request inside a chunk's data is body to the upstream too.
	smuggledInBody := "POST /c HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(get("other.test")), get("other.test"))
	cases := []struct {
		name     string
		in       string
		forward  string // the bytes forwarded; "" with reason "" means all of in
		reason   string // the refusal; "" when the stream is accepted whole
		contains string // in the refusal's detail
	}{
		{"keep-alive requests to the allowed host", ok + post + chunked + ok, "", "", ""},
		{"HTTP/1.0 and a Host with a port", "GET / HTTP/1.0\r\nHost: " + allowedHost + ":80\r\n\r\n" + ok, "", "", ""},
		{"Expect: 100-continue", "PUT /x HTTP/1.1\r\nHost: " + allowedHost + "\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc" + ok, "", "", ""},
		{"a request smuggled inside a chunk is body", smuggledInBody + ok, "", "", ""},
		{"gzip then chunked", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "", "", ""},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\nHost: " + allowedHost + "\r\n\r\n", "", "", ""},
		{"absolute form to the allowed host", "GET http://" + allowedHost + "/x HTTP/1.1\r\nHost: " + allowedHost + "\r\n\r\n", "", "", ""},

		{"second keep-alive request with another Host", ok + get("other.test"), ok, ReasonHost, "other.test"},
		{"pipelined: the third request", ok + post + get("other.test") + ok, ok + post, ReasonHost, "other.test"},
		{"a Host with userinfo", "GET / HTTP/1.1\r\nHost: " + allowedHost + ":80@other.test\r\n\r\n", "", ReasonHTTPSyntax, "bad port"},
		{"a Host with a bad port", "GET / HTTP/1.1\r\nHost: " + allowedHost + ":]\r\n\r\n", "", ReasonHTTPSyntax, "bad port"},
		{"a Host with a path", "GET / HTTP/1.1\r\nHost: other.test/" + allowedHost + "\r\n\r\n", "", ReasonHTTPSyntax, "Host"},
		{"an IPv6 Host on a domain flow", "GET / HTTP/1.1\r\nHost: [2001:db8::1]:80\r\n\r\n", "", ReasonHost, "2001:db8::1"},
		{"first request with another Host", get("other.test"), "", ReasonHost, "other.test"},
		{"absolute form naming another host", ok + "GET http://other.test/ HTTP/1.1\r\nHost: " + allowedHost + "\r\n\r\n", ok, ReasonHost, "other.test"},
		{"absolute form with userinfo", "GET http://" + allowedHost + "@other.test/ HTTP/1.1\r\nHost: " + allowedHost + "\r\n\r\n", "", ReasonHTTPSyntax, "userinfo"},
		{"absolute form of another scheme", "GET ftp://other.test/ HTTP/1.1\r\nHost: " + allowedHost + "\r\n\r\n", "", ReasonHTTPSyntax, "absolute URI"},
		{"request after a chunked body", chunked + get("other.test"), chunked, ReasonHost, "other.test"},
		{"request after a Content-Length body", post + get("other.test"), post, ReasonHost, "other.test"},
		{"HTTP/1.0 without Host", "GET / HTTP/1.0\r\n\r\n", "", ReasonHost, "absent"},
		{"HTTP/1.1 without Host", "GET / HTTP/1.1\r\nX: y\r\n\r\n", "", ReasonHTTPSyntax, "without Host"},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\r\nHost: other.test\r\n\r\n", "", ReasonHTTPSyntax, "2 Host"},
		{"CONNECT", ok + "CONNECT other.test:443 HTTP/1.1\r\nHost: other.test:443\r\n\r\n", ok, ReasonHTTPConnect, "CONNECT"},
		{"WebSocket upgrade", ok + "GET /ws HTTP/1.1\r\nHost: " + allowedHost + "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", ok, ReasonHTTPUpgrade, "websocket"},
		{"h2c upgrade", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", "", ReasonHTTPUpgrade, "h2c"},
		{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "", ReasonHTTPUpgrade, "prior-knowledge"},
		{"h2 preface after a request", ok + "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", ok, ReasonHTTPUpgrade, "prior-knowledge"},
		{"HTTP/2.0 version", "GET / HTTP/2.0\r\nHost: " + allowedHost + "\r\n\r\n", "", ReasonHTTPSyntax, "version"},
		{"not HTTP after a request", ok + "\x16\x03\x01\x00\x05hello\r\n\r\n", ok, ReasonHTTPSyntax, "NUL"},
		{"Content-Length and Transfer-Encoding", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "", ReasonHTTPSyntax, "both"},
		{"two Content-Lengths", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nContent-Length: 4\r\nContent-Length: 4\r\n\r\nabcd", "", ReasonHTTPSyntax, "2 Content-Length"},
		{"Content-Length list", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nContent-Length: 4, 4\r\n\r\nabcd", "", ReasonHTTPSyntax, "Content-Length"},
		{"signed Content-Length", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nContent-Length: +4\r\n\r\nabcd", "", ReasonHTTPSyntax, "Content-Length"},
		{"chunked not last", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", "", ReasonHTTPSyntax, "last"},
		{"chunked twice", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", "", ReasonHTTPSyntax, "once"},
		{"Transfer-Encoding in HTTP/1.0", "POST / HTTP/1.0\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "", ReasonHTTPSyntax, "HTTP/1.0"},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\r\nX-A: 1\r\n other.test\r\n\r\n", "", ReasonHTTPSyntax, "obs-fold"},
		{"space before the colon", "GET / HTTP/1.1\r\nHost : other.test\r\nHost: " + allowedHost + "\r\n\r\n", "", ReasonHTTPSyntax, "header line"},
		{"bare LF", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\nHost: other.test\r\n\r\n", "", ReasonHTTPSyntax, "bare LF"},
		{"bare CR", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\rX: y\r\n\r\n", "", ReasonHTTPSyntax, "bare CR"},
		{"NUL", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\x00\r\n\r\n", "", ReasonHTTPSyntax, "NUL"},
		{"control byte in a value", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\r\nX: a\x01b\r\n\r\n", "", ReasonHTTPSyntax, "control byte"},
		{"leading empty line", "\r\n" + ok, "", ReasonHTTPSyntax, "request line"},
		{"chunk size overflow", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000001\r\n", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n", ReasonHTTPSyntax, "chunk size"},
		{"chunk size not hex", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n", ReasonHTTPSyntax, "chunk size"},
		{"chunk data without CRLF", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", "POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello", ReasonHTTPSyntax, "CRLF"},
		{"head over the bound", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\r\nX: " + strings.Repeat("a", maxHead) + "\r\n\r\n", "", ReasonHTTPSyntax, "longer than"},
		{"too many fields", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\r\n" + strings.Repeat("X: y\r\n", maxHeaderRows) + "\r\n", "", ReasonHTTPSyntax, "header fields"},
	}
	check := hostCheck(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := c.forward
			if c.reason == "" && want == "" {
				want = c.in
			}
			for _, r := range []struct {
				name string
				r    io.Reader
			}{{"whole", strings.NewReader(c.in)}, {"byte by byte", iotest.OneByteReader(strings.NewReader(c.in))}} {
				var out bytes.Buffer
				err := copyRequests(&out, r.r, check, nil)
				if out.String() != want {
					t.Errorf("%s: forwarded %.200q, want %.200q", r.name, out.String(), want)
				}
				checkRefusal(t, r.name, err, c.reason, c.contains)
				if c.reason != "" && !errdefs.IsPermissionDenied(err) {
					t.Errorf("%s: refusal %v is not PermissionDenied", r.name, err)
				}
			}
		})
	}
}

// TestCopyRequestsLargeBodies: bodies far larger than the reader's buffer
// are forwarded whole, and the request after them is still decided.
func TestCopyRequestsLargeBodies(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	var in bytes.Buffer
	in.WriteString("POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nContent-Length: 1048576\r\n\r\n")
	in.Write(body)
	in.WriteString("POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n")
	in.Write(body)
	in.WriteString("\r\n0\r\n\r\n")
	allowed := in.Len()
	in.WriteString(get("other.test"))
	var out bytes.Buffer
	err := copyRequests(&out, bytes.NewReader(in.Bytes()), hostCheck(t), nil)
	var fr *flowRefusal
	if !errors.As(err, &fr) || fr.reason != ReasonHost {
		t.Fatalf("err %v, want the request after the bodies refused", err)
	}
	if !bytes.Equal(out.Bytes(), in.Bytes()[:allowed]) {
		t.Fatalf("forwarded %d bytes, want the first %d exactly", out.Len(), allowed)
	}
}

// FuzzCopyRequests: whatever the guest sends, what copyRequests forwards
// is exactly a prefix of it, and every request net/http reads from that
// prefix (as an upstream would) names the allowed host.
func FuzzCopyRequests(f *testing.F) {
	for _, s := range []string{
		get(allowedHost) + get("other.test"),
		"POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + get("other.test"),
		"POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nContent-Length: 0\r\n\r\nGET http://other.test/ HTTP/1.1\r\nHost: " + allowedHost + "\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: " + allowedHost + "\r\nX: a\r\n b\r\n\r\n",
		"GET / HTTP/1.1\nHost: " + allowedHost + "\n\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: " + allowedHost + "\r\nTransfer-Encoding: chunked\r\n\r\n3;a=b\r\nabc\r\n0\r\nT: 1\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: " + allowedHost + "\r\nUpgrade: websocket\r\n\r\n" + get("other.test"),
	} {
		f.Add([]byte(s))
	}
	check := hostCheck(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		// With a gate that never switches: a first-request upgrade is let
		// through and every request after it is still decided.
		gate := newUpgradeGate()
		go func() {
			<-gate.decided
			gate.verdict <- false
		}()
		var out bytes.Buffer
		err := copyRequests(&out, bytes.NewReader(in), check, gate)
		if !bytes.HasPrefix(in, out.Bytes()) {
			t.Fatalf("forwarded bytes are not a prefix of the input:\nin  %q\nout %q", in, out.Bytes())
		}
		if errors.Is(err, io.EOF) && out.Len() != len(in) {
			t.Fatalf("accepted to the end but forwarded %d of %d bytes", out.Len(), len(in))
		}
		br := bufio.NewReader(bytes.NewReader(out.Bytes()))
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if canonicalHost(req.Host) != allowedHost {
				t.Fatalf("net/http read a request for Host %q from the forwarded bytes %q", req.Host, out.Bytes())
			}
			if req.URL.Host != "" && canonicalHost(req.URL.Host) != allowedHost {
				t.Fatalf("net/http read a request for %q from the forwarded bytes %q", req.URL.Host, out.Bytes())
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
		}
	})
}

// canonicalHost is host without its port, in lower case, without a final
// dot: the name an upstream serves.
func canonicalHost(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

// TestHostCheckerFollowsThePolicy: the gateway's per-flow check remembers
// the last allowed Host only under the same policy: on a flow allowed by
// address, a live update that denies a domain refuses the next request
// naming it.
func TestHostCheckerFollowsThePolicy(t *testing.T) {
	open, _ := egress.ParsePolicy([]byte(`{"allow_internet": true}`))
	deny, _ := egress.ParsePolicy([]byte(`{"allow_internet": true, "deny": {"domains": ["x.test"]}}`))
	h := egress.NewHolder(open)
	check := hostChecker(h, candidates{raw: true})
	for i := 0; i < 2; i++ {
		if err := check("x.test"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	h.Store(deny)
	if err := check("x.test"); err == nil {
		t.Fatal("x.test was still allowed after the policy denied it")
	}
	if err := check("y.test"); err != nil {
		t.Fatalf("y.test: %v", err)
	}
	if err := check("x.test"); err == nil {
		t.Fatal("x.test allowed after another name")
	}
}

// TestCopyRequestsUpgradeGate: with a gate, a WebSocket upgrade on the
// first request is forwarded and the copy waits for the upstream's answer:
// after a 101 the rest passes as is, after anything else every request is
// decided again; an upgrade anywhere else, or with a body, is refused.
func TestCopyRequestsUpgradeGate(t *testing.T) {
	up := "GET /ws HTTP/1.1\r\nHost: " + allowedHost + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
	cases := []struct {
		name     string
		in       string
		switched bool
		forward  string
		reason   string
	}{
		{"101: the rest is opaque", up + get("other.test"), true, up + get("other.test"), ""},
		{"not switched: the next request is decided", up + get("other.test"), false, up, ReasonHost},
		{"not switched: allowed requests go on", up + get(allowedHost), false, up + get(allowedHost), ""},
		{"upgrade on a second request", get(allowedHost) + up, true, get(allowedHost), ReasonHTTPUpgrade},
		{"upgrade with a body", "GET /ws HTTP/1.1\r\nHost: " + allowedHost + "\r\nUpgrade: websocket\r\nContent-Length: 3\r\n\r\nabc", true, "", ReasonHTTPUpgrade},
		{"upgrade of a POST", "POST /ws HTTP/1.1\r\nHost: " + allowedHost + "\r\nUpgrade: websocket\r\n\r\n", true, "", ReasonHTTPUpgrade},
		{"h2c on the first request", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\r\nUpgrade: h2c\r\n\r\n", true, "", ReasonHTTPUpgrade},
		{"two Upgrade fields", "GET / HTTP/1.1\r\nHost: " + allowedHost + "\r\nUpgrade: websocket\r\nUpgrade: h2c\r\n\r\n", true, "", ReasonHTTPUpgrade},
		{"upgrade to another host", "GET /ws HTTP/1.1\r\nHost: other.test\r\nUpgrade: websocket\r\n\r\n", true, "", ReasonHost},
	}
	check := hostCheck(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gate := newUpgradeGate()
			gate.verdict <- c.switched // buffered: taken only if an upgrade is let through
			var out bytes.Buffer
			err := copyRequests(&out, strings.NewReader(c.in), check, gate)
			if out.String() != c.forward {
				t.Errorf("forwarded %q, want %q", out.String(), c.forward)
			}
			var fr *flowRefusal
			switch {
			case c.reason == "" && !errors.Is(err, io.EOF):
				t.Errorf("err %v, want the stream accepted to its end", err)
			case c.reason != "" && (!errors.As(err, &fr) || fr.reason != c.reason):
				t.Errorf("err %v, want a %s refusal", err, c.reason)
			}
		})
	}
}

// TestUpgradeVerdict: the response side reads the first final response
// head for its verdict, past 1xx interim ones, forwarding every byte.
func TestUpgradeVerdict(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want bool
	}{
		{"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\nframes", true},
		{"100 then 101", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n\r\n", true},
		{"200", "HTTP/1.1 200 OK\r\nContent-Length: 26\r\n\r\nHTTP/1.1 101 Switching ...", false},
		{"426", "HTTP/1.1 426 Upgrade Required\r\n\r\n", false},
		{"closed before an answer", "HTTP/1.1 101 Swi", false},
		{"not HTTP", "SSH-2.0-x\r\n\r\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			gate := newUpgradeGate()
			gate.decide(true)
			var out bytes.Buffer
			gate.copyResponses(&out, strings.NewReader(c.in))
			if got := gate.switched(); got != c.want {
				t.Errorf("switched %v, want %v", got, c.want)
			}
			if out.String() != c.in {
				t.Errorf("forwarded %q, want %q", out.String(), c.in)
			}
		})
	}
}

// checkRefusal checks the error a guard ended a stream with: io.EOF (the
// stream accepted to its end) when reason is "", else a *flowRefusal of that
// reason whose text contains detail.
func checkRefusal(t *testing.T, name string, err error, reason, detail string) {
	t.Helper()
	var fr *flowRefusal
	switch {
	case reason == "" && !errors.Is(err, io.EOF):
		t.Errorf("%s: err %v, want the stream accepted to its end", name, err)
	case reason != "" && !errors.As(err, &fr):
		t.Errorf("%s: err %v, want a %s refusal", name, err, reason)
	case reason != "" && (fr.reason != reason || !strings.Contains(fr.why, detail)):
		t.Errorf("%s: refusal %s %q, want %s containing %q", name, fr.reason, fr.why, reason, detail)
	}
}
