package restapi

import (
	"net/http"
	"strings"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
)

// A browser cannot set the Authorization header on a WebSocket, and a key
// in the URL would end up in logs and history. A browser client (the web
// console) offers two subprotocols instead: ExecSubprotocol, which the exec
// stream selects and echoes, and WSBearerPrefix+key, which carries the API
// key in the handshake's Sec-WebSocket-Protocol header and is never echoed.
const (
	ExecSubprotocol = sandboxv1.ExecSubprotocol
	WSBearerPrefix  = sandboxv1.WSBearerPrefix
)

// WebSocketBearer returns the API key a WebSocket upgrade request carries
// as a WSBearerPrefix subprotocol, and whether it carries one. A request
// that is not a WebSocket upgrade carries none.
func WebSocketBearer(r *http.Request) (string, bool) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return "", false
	}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if key, ok := strings.CutPrefix(strings.TrimSpace(p), WSBearerPrefix); ok && key != "" {
				return key, true
			}
		}
	}
	return "", false
}
