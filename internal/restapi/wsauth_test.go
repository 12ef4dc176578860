package restapi

import (
	"net/http/httptest"
	"testing"
)

func TestWebSocketBearer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		upgrade  string
		protos   []string
		want     string
		wantSeen bool
	}{
		{"console handshake", "websocket", []string{ExecSubprotocol + ", " + WSBearerPrefix + "space_k-abc_12"}, "space_k-abc_12", true},
		{"separate headers", "WebSocket", []string{ExecSubprotocol, WSBearerPrefix + "k"}, "k", true},
		{"no bearer offered", "websocket", []string{ExecSubprotocol}, "", false},
		{"empty key", "websocket", []string{WSBearerPrefix}, "", false},
		// A plain request never authenticates by the header: only an
		// upgrade, where a browser has no other way.
		{"not an upgrade", "", []string{WSBearerPrefix + "k"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/sandboxes/x/exec", nil)
			if tc.upgrade != "" {
				r.Header.Set("Upgrade", tc.upgrade)
			}
			for _, p := range tc.protos {
				r.Header.Add("Sec-WebSocket-Protocol", p)
			}
			got, ok := WebSocketBearer(r)
			if got != tc.want || ok != tc.wantSeen {
				t.Fatalf("WebSocketBearer = %q, %v; want %q, %v", got, ok, tc.want, tc.wantSeen)
			}
		})
	}
}
