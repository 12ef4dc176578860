package e2bapi

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spacesandbox/space/internal/apierr"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
)

func TestParseE2BTarget(t *testing.T) {
	id := "abcdefghij0123456789"
	tests := []struct {
		host, hdrID, hdrPort string
		want                 e2bTarget
		ok, err              bool
	}{
		{"127.0.0.1:7070", "", "", e2bTarget{}, false, false},
		{"127.0.0.1:7070", id, "49983", e2bTarget{id: id, port: 49983}, true, false},
		{"127.0.0.1:7070", id, "8080", e2bTarget{id: id, port: 8080}, true, false},
		{"127.0.0.1:7070", "BAD", "49983", e2bTarget{port: 49983}, true, false},
		{"127.0.0.1:7070", id, "", e2bTarget{}, true, true},
		{"127.0.0.1:7070", "", "49983", e2bTarget{}, true, true},
		{"127.0.0.1:7070", id, "0", e2bTarget{}, true, true},
		{"127.0.0.1:7070", id, "+1", e2bTarget{}, true, true},
		{"49983-" + id + ".localhost:7070", "", "", e2bTarget{id: id, port: 49983, byHost: true}, true, false},
		{"49983-" + id + ".LOCALHOST.", id, "49983", e2bTarget{id: id, port: 49983, byHost: true}, true, false},
		{"8080-" + id + ".localhost", "", "", e2bTarget{}, false, false}, // SPACE's ingress
		{"8080-" + id + ".localhost", id, "8080", e2bTarget{id: id, port: 8080, byHost: true}, true, false},
		{"49983-" + id + ".localhost", "zzzzzzzzzzzzzzzzzzzz", "49983", e2bTarget{}, true, true},
		{"49983-" + id + ".localhost", id, "8080", e2bTarget{}, true, true},
		{"49983-" + id + ".localhost", "", "8080", e2bTarget{}, true, true},
		{"49983-x.localhost", "", "", e2bTarget{}, false, false}, // not a sandbox id: SPACE's ingress answers 404
	}
	for _, tt := range tests {
		got, ok, err := parseE2BTarget(tt.host, "localhost", tt.hdrID, tt.hdrPort)
		if ok != tt.ok || (err != nil) != tt.err || err == nil && got != tt.want {
			t.Errorf("parseE2BTarget(%q, %q, %q) = %+v, %v, %v; want %+v, %v, err %v", tt.host, tt.hdrID, tt.hdrPort, got, ok, err, tt.want, tt.ok, tt.err)
		}
	}
}

func FuzzParseE2BTarget(f *testing.F) {
	id := "abcdefghij0123456789"
	f.Add("127.0.0.1:7070", id, "49983")
	f.Add("49983-"+id+".localhost:7070", "", "")
	f.Add("49983-"+id+".localhost", id, "8080")
	f.Add("8080-"+id+".localhost.", "", "")
	f.Add("[::1]:80", "", "1")
	f.Fuzz(func(t *testing.T, host, hdrID, hdrPort string) {
		got, ok, err := parseE2BTarget(host, "localhost", hdrID, hdrPort)
		if err != nil {
			if st, _, _ := apierr.Encode(apierr.ControlPlane, err); st != http.StatusBadRequest {
				t.Fatalf("error maps to %d: %v", st, err)
			}
			return
		}
		if !ok {
			return
		}
		if got.id != "" && !sandbox.ValidID(got.id) {
			t.Fatalf("target id %q is not a sandbox id", got.id)
		}
		// A target is named by one source only: when both the Host and
		// the headers name one, they agree.
		if hdrID != "" && got.id != "" && got.id != hdrID {
			t.Fatalf("target %q, header %q", got.id, hdrID)
		}
		if got.port != 0 && (got.port < 1 || got.port > 65535) {
			t.Fatalf("port %d", got.port)
		}
	})
}

func FuzzE2BSignature(f *testing.F) {
	tok := strings.Repeat("ab", 32)
	f.Add("GET", "path=%2Fa&signature="+url.QueryEscape(sign("/a", "read", "", tok, 0)))
	f.Add("POST", "path=a&username=user&signature=v1_x&signature_expiration=99999999999")
	f.Add("GET", "signature=&signature=v1_&path=&path=")
	f.Fuzz(func(t *testing.T, method, query string) {
		r := httptest.NewRequest(http.MethodGet, "/files", nil)
		r.Method, r.URL.RawQuery = method, query
		if !e2bSignatureValid(r, tok, time.Now()) {
			return
		}
		// Whatever was accepted is exactly the signature of what the
		// query names.
		q := r.URL.Query()
		op := "read"
		if method == http.MethodPost {
			op = "write"
		}
		exp, _ := strconv.ParseInt(q.Get("signature_expiration"), 10, 64)
		if q.Get("signature") != sign(q.Get("path"), op, q.Get("username"), tok, exp) {
			t.Fatalf("accepted %q for %s", query, method)
		}
	})
}

func TestWithoutSignature(t *testing.T) {
	for in, want := range map[string]string{
		"":                   "",
		"path=a&signature=x": "path=a",
		"signature=x&signature_expiration=1&username=u": "username=u",
		"sig%6eature=x&path=%2F":                        "path=%2F",
		"path=a%26signature%3Dx":                        "path=a%26signature%3Dx",
	} {
		if got := withoutSignature(in); got != want {
			t.Errorf("withoutSignature(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestE2BErrorWriter(t *testing.T) {
	// A SPACE error answer, as the API key check writes it.
	h := (&API{}).e2bErrors(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"code": "unauthenticated", "message": "missing or invalid API key; send Authorization: Bearer <key>"})
	}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	var e struct {
		Code    int
		Message string
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || rec.Code != 401 || e.Code != 401 || !strings.Contains(e.Message, "API key") {
		t.Errorf("HTTP %d %s, want 401 {code: 401, message}", rec.Code, rec.Body)
	}
}

func FuzzParseE2BMetadata(f *testing.F) {
	f.Add("team%3Da%2520b%26x%3Dy")
	f.Add("a=b&c=%ZZ")
	f.Add("=;&&=")
	f.Fuzz(func(t *testing.T, raw string) {
		if _, err := parseE2BMetadata(raw); err != nil {
			if st, _, _ := apierr.Encode(apierr.ControlPlane, err); st != 400 {
				t.Fatalf("error maps to %d", st)
			}
		}
	})
}

func FuzzParseE2BPage(f *testing.F) {
	cur := pageCursor{key: []byte("fuzz-key"), tenant: "acme", kind: pageSandboxes}
	f.Add("limit=5&nextToken=" + cur.seal(pageItem{id: "abcdefghij0123456789", at: time.Unix(1700000000, 0)}) + "&order=desc")
	f.Add("nextToken=-1.sn-abc")
	f.Add("limit=1e3")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p, err := parseE2BPage(q, cur)
		if err != nil {
			if st, _, _ := apierr.Encode(apierr.ControlPlane, err); st != 400 {
				t.Fatalf("error maps to %d", st)
			}
			return
		}
		if p.limit < 1 || p.limit > e2bMaxLimit {
			t.Fatalf("limit %d", p.limit)
		}
		if p.after != nil {
			if back, ok := cur.open(cur.seal(*p.after)); !ok || back.id != p.after.id || !back.at.Equal(p.after.at) {
				t.Fatalf("token of %+v does not round-trip", p.after)
			}
		}
	})
}

func TestParseMeminfo(t *testing.T) {
	good := "MemTotal:         243928 kB\nMemFree:          209752 kB\nMemAvailable:     206276 kB\nBuffers:            1000 kB\nCached:            30000 kB\nSwapCached:            0 kB\n"
	mi, err := parseMeminfo([]byte(good))
	if err != nil || mi.total != 243928*1024 || mi.available != 206276*1024 || mi.cached != 30000*1024 {
		t.Fatalf("parseMeminfo = %+v, %v", mi, err)
	}
	for _, bad := range []string{
		"", "MemTotal: 1 kB\n", "MemTotal: x kB\nMemAvailable: 1 kB\nCached: 1 kB\n",
		"MemTotal: 1 MB\nMemAvailable: 1 kB\nCached: 1 kB\n", "MemTotal: 99999999999999999999 kB\nMemAvailable: 1 kB\nCached: 1 kB\n",
		"MemTotal: 0 kB\nMemAvailable: 0 kB\nCached: 0 kB\n",
	} {
		if _, err := parseMeminfo([]byte(bad)); err == nil {
			t.Errorf("parseMeminfo(%q) accepted", bad)
		}
	}
}

func FuzzParseMeminfo(f *testing.F) {
	f.Add([]byte("MemTotal: 243928 kB\nMemAvailable: 206276 kB\nCached: 30000 kB\n"))
	f.Add([]byte("MemTotal:\nCached: 1 kB kB\n:::\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mi, err := parseMeminfo(b)
		if err == nil && (mi.total == 0 || mi.total > 1<<50 || mi.available > 1<<50 || mi.cached > 1<<50) {
			t.Fatalf("parseMeminfo accepted %+v", mi)
		}
	})
}

func TestParseE2BNetwork(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		network string
		secure  *bool
		public  bool
		err     bool
	}{
		{"", nil, true, false},
		{"null", nil, true, false},
		{"{}", nil, true, false},
		{`{"allowPublicTraffic":true}`, nil, true, false},
		{`{"allowPublicTraffic":null}`, &no, true, false},
		{`{"allowPublicTraffic":false}`, nil, false, false},
		{`{"allowPublicTraffic":false}`, &yes, false, false},
		{`{"allowPublicTraffic":false}`, &no, false, true},
		{`{"allowPublicTraffic":true}`, &no, true, false},
		{`{"allowPublicTraffic":false,"allowOut":[],"denyOut":null,"rules":{},"maskRequestHost":""}`, nil, false, false},
		{`{"allowPublicTraffic":"false"}`, nil, false, true},
		{`{"allowPublicTraffic":0}`, nil, false, true},
		{`{"AllowPublicTraffic":false}`, nil, false, false},
		{`{"allowPublicTraffic":true,"ALLOWPUBLICTRAFFIC":false}`, nil, false, false},
		{`{"allowpublictraffic":true}`, nil, true, false},
		{`{"maskRequestHost":false}`, nil, false, true},
		{`{"denyOut":["0.0.0.0/0"]}`, nil, true, false},
		{`{"allowOut":["example.com"]}`, nil, true, false},
		{`{"maskRequestHost":"localhost:${PORT}"}`, nil, true, false},
		{`{"maskRequestHost":"a b"}`, nil, false, true},
		{`{"egressProxy":{"address":"p:1080"}}`, nil, false, true},
		{`{"rules":{"a.com":[{}]}}`, nil, true, false}, // parseE2BRules reads it
		{`{"httpsPorts":[3000]}`, nil, false, true},
		{`[]`, nil, false, true},
		{`"x"`, nil, false, true},
		{`true`, nil, false, true},
	} {
		rule, err := parseE2BNetwork(json.RawMessage(tc.network), tc.secure)
		if public := rule.Public; public != tc.public || (err != nil) != tc.err || err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parseE2BNetwork(%s, secure %v) = %+v, %v; want public %v, error %v", tc.network, tc.secure, rule, err, tc.public, tc.err)
		}
	}
}

func FuzzParseE2BNetwork(f *testing.F) {
	f.Add(`{"allowPublicTraffic":false}`, false)
	f.Add(`{"allowOut":[],"rules":{}}`, true)
	f.Add(`{"maskRequestHost":"x"}`, true)
	f.Fuzz(func(t *testing.T, network string, secure bool) {
		rule, err := parseE2BNetwork(json.RawMessage(network), &secure)
		public := rule.Public
		if err != nil && (public || rule.HostMask != "" || !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Fatalf("parseE2BNetwork(%q) = %v, %v: an error must be InvalidArgument and say not public", network, public, err)
		}
		if err == nil && !public && !secure {
			t.Fatalf("parseE2BNetwork(%q) made a private sandbox with secure false", network)
		}
		if err == nil && rule.HostMask != "" {
			checkMaskedHosts(t, rule.HostMask)
		}
	})
}

// sign makes envd's URL signature.
func sign(path, op, user, token string, exp int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != 0 {
		raw += ":" + strconv.FormatInt(exp, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// TestE2BSignatureExpired: a genuine signature past its expiry is told
// apart (envd's "signature is already expired"); a forged or edited one
// with a past expiry is only invalid.
func TestE2BSignatureExpired(t *testing.T) {
	tok := strings.Repeat("ab", 32)
	now := time.Unix(2000, 0)
	req := func(query string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/files", nil)
		r.URL.RawQuery = query
		return r
	}
	q := func(sig string, exp int64) string {
		return "path=%2Fa&signature=" + url.QueryEscape(sig) + "&signature_expiration=" + strconv.FormatInt(exp, 10)
	}
	for name, tc := range map[string]struct {
		query string
		want  e2bAuth
	}{
		"valid":               {q(sign("/a", "read", "", tok, 3000), 3000), authOK},
		"expired":             {q(sign("/a", "read", "", tok, 1000), 1000), authExpired},
		"forged, expired":     {q(sign("/a", "read", "", "guess", 1000), 1000), authNone},
		"expiry edited":       {q(sign("/a", "read", "", tok, 1000), 999), authNone},
		"another path":        {"path=%2Fb&signature=" + url.QueryEscape(sign("/a", "read", "", tok, 1000)) + "&signature_expiration=1000", authNone},
		"expiry not a number": {"path=%2Fa&signature=" + url.QueryEscape(sign("/a", "read", "", tok, 0)) + "&signature_expiration=soon", authNone},
	} {
		if got := e2bSignatureCheck(req(tc.query), tok, now); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}
