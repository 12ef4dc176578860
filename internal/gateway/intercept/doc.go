// Package intercept adds credentials to a sandbox's HTTPS requests without
// the secret ever entering the sandbox: the gateway terminates the guest's
// TLS with a per-sandbox CA the guest trusts, and re-encrypts each request
// to the real upstream with the secret added on the way out.
//
// # What is intercepted
//
// Only TLS connections to a host that has a credential rule. The gateway
// decides, per connection and before calling Serve: it allows the flow with
// the egress policy, reads and checks the ClientHello's SNI
// (egress.Policy.CheckSNI), and asks credentials.Manager.Applies for the SNI
// host (or, without an SNI, the destination address). Only when a live
// credential in the sandbox's scope allows that host does it hand the
// connection to Interceptor.Serve; every other flow is spliced through
// untouched and stays end-to-end encrypted. Applies charges no rate limit
// and writes no audit entry; Serve resolves the credential again for every
// request, and each resolution is audited.
//
// # What the guest sees
//
// A TLS server certificate for the host, issued by the sandbox's CA (valid
// 24 hours, cached per host), offering HTTP/1.1 only by ALPN; a client that
// insists on h2 fails the handshake. Requests are answered by the real
// upstream. The guest never sees the secret: it sends a placeholder, or
// nothing, in the credential's header (or query parameter), and the
// interceptor replaces whatever is there. For Injection method "header" the
// header Name is set to the secret, for "basic" Authorization is set to
// "Basic base64(user:password)", for "query" the parameter Name is set,
// other parameters keeping their order and bytes, for "headers" each of
// the comma-joined names in Name is set to its value (the secret's
// newline-joined values, in order; all of them, or the request is
// refused). A host for which
// Resolve finds no credential (the rule was deleted since Applies) is
// forwarded with nothing added.
//
// Each request is re-framed for the upstream (origin-form target, hop-by-hop
// headers removed, Expect answered locally with 100 Continue), bodies stream
// both ways without buffering, and a response of unknown length is chunked
// for the guest. The upstream's certificate is verified against
// Interceptor.UpstreamRoots for the same host name.
//
// # What comes back: responses are redacted
//
// From the first request on a connection that received a secret, every
// response on that connection is scanned for every secret injected on it
// so far (several rules, rotated secrets), in each form a response could
// carry it: the raw bytes; standard and URL-safe base64 at each of the
// three alignments (the characters that depend only on the secret, so a
// secret inside a longer base64 string, padded or not, is found);
// percent-encoding (query, path, and every byte escaped; upper- and
// lower-case hex); JSON string escaping as encoders write it (\/, \u00XX
// for HTML characters, for every punctuation byte, and for non-ASCII);
// and those escapings of the base64 forms. For basic injection both
// "user:password" and, when at least credentials.MinSecretLen bytes, the
// password alone are secrets; for "headers" injection each value is a
// secret of its own. The status line, every header name (in any
// ASCII case: net/http canonicalises names) and value, 1xx responses, the
// body and the trailers are scanned; a Location of a redirect is a header
// like any other.
//
// Every byte of every occurrence is overwritten with one marker byte
// (the first of "*#~^!|`$&'+-._" that appears in no form), so lengths stay
// the same: a Content-Length stays right and JSON stays well formed. The
// scan is one Aho–Corasick automaton per connection; a body streams
// through it in constant memory, holding back at most the longest form's
// length minus one byte between reads, so a secret split across TCP
// segments or chunks is still found. Bytes held back when a read fails
// are dropped, never released.
//
// A request that carries a secret is sent with "Accept-Encoding: identity"
// and without Range or If-Range (a secret cut across the parts of range
// requests would be in none of them whole). An upstream that compresses
// anyway with gzip or deflate is decoded by the interceptor and relayed
// uncompressed (Content-Encoding and Content-Length dropped, the body
// chunked; trailers after a compressed body are not relayed); any other
// coding is refused with 502, counted in Counters.Unscannable.
//
// Each redaction is logged (credential id, where, count: never the
// bytes), counted in Counters.Redactions, and, when the CredentialSource
// is a RedactionRecorder, written to the credential audit log. A failed
// audit write fails closed: found in the status line or header, the
// response is answered 502 instead; found in the body, the response is cut
// there and the connection closed.
//
// # What is refused
//
// The interceptor answers locally, then closes the connection, when:
//
//   - the Host header does not name the TLS server name (ASCII case and the
//     port ignored), or the egress policy refuses it (CheckHost): 403;
//   - the credential has expired: 403; it is rate limited: 429 (nothing is
//     forwarded); it cannot be resolved or added: 502;
//   - the upstream cannot be reached or fails certificate verification: 502;
//   - the request carries a credential of its own beside the one the
//     gateway adds (Authorization, X-Api-Key, Api-Key, X-Goog-Api-Key,
//     X-Auth-Token, X-Access-Token, Private-Token, X-Amz-Security-Token,
//     other than the header the credential sets): 403. The upstream could
//     prefer it, and the sandbox would reach an allowed host under an
//     account of its choosing, an exfiltration path;
//   - the secret cannot be redacted (shorter than credentials.MinSecretLen,
//     or using every marker candidate): 502, and it is not sent;
//   - a response in a content coding that cannot be scanned: 502;
//   - TRACE: 501 (it echoes the request);
//   - CONNECT, or a protocol upgrade (WebSocket, h2c): 501. A connection
//     that carries a credential stays request/response HTTP/1.1, so every
//     request goes through the checks above; tunnelling past them is not
//     offered;
//   - a malformed request: 400; a header over MaxRequestHeaderBytes: 431;
//     an Expect other than 100-continue: 417.
//
// # Limits
//
// Redaction finds the forms listed above, byte for byte. An upstream that
// transforms the secret otherwise (changes its case in a body, hex-encodes
// or hashes it, encrypts or compresses it in its own format, spreads it
// over several responses, or reveals it a few bits at a time through
// lengths or timing) is not caught: upstreams allowed to receive a
// credential are still trusted not to leak it on purpose. The marker keeps
// the secret's length visible. A sandbox can still send its own credential
// in a place the header list does not name (another header, the body, a
// query parameter). The secret is copied into Go strings to build the
// outgoing request, and kept as a byte copy for the redactor until the
// connection ends, when that copy is zeroed; the string copies live until
// the garbage collector reclaims them.
package intercept
