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
// other parameters keeping their order and bytes. A host for which
// Resolve finds no credential (the rule was deleted since Applies) is
// forwarded with nothing added.
//
// Each request is re-framed for the upstream (origin-form target, hop-by-hop
// headers removed, Expect answered locally with 100 Continue), bodies stream
// both ways without buffering, and a response of unknown length is chunked
// for the guest. The upstream's certificate is verified against
// Interceptor.UpstreamRoots for the same host name.
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
//   - CONNECT, or a protocol upgrade (WebSocket, h2c): 501. A connection
//     that carries a credential stays request/response HTTP/1.1, so every
//     request goes through the checks above; tunnelling past them is not
//     offered;
//   - a malformed request: 400; a header over MaxRequestHeaderBytes: 431;
//     an Expect other than 100-continue: 417.
//
// # Limits
//
// Upstreams allowed to receive a credential are trusted with it: an
// endpoint that echoes request headers back would show the guest the
// secret, and the interceptor does not scan response bodies for it. The
// secret is copied into Go strings to build the outgoing request; the
// credential's own bytes are zeroed once the request is built, but those
// string copies live until the garbage collector reclaims them.
package intercept
