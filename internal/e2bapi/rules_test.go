package e2bapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/service"
)

// ruleValue is a header value long enough to be a rule's, and to be
// looked for in error messages.
const ruleValue = "Bearer rule-value-0123456789"

// one is a rule's one header, of value ruleValue.
func one(name string) []service.RuleHeader {
	return []service.RuleHeader{{Name: name, Value: ruleValue}}
}

func ruleJSON(host, header, value string) string {
	h, _ := json.Marshal(host)
	n, _ := json.Marshal(header)
	v, _ := json.Marshal(value)
	return fmt.Sprintf(`{%s:[{"transform":{"headers":{%s:%s}}}]}`, h, n, v)
}

// TestParseE2BRules: E2B's rules as the published SDK sends them become
// one header rule per host, keys in lowercase; what SPACE cannot do
// safely is refused with a 400 naming the host and never quoting the
// value.
func TestParseE2BRules(t *testing.T) {
	ok := []struct {
		raw  string
		want []service.HeaderRule
	}{
		{``, nil},
		{`null`, nil},
		{`{}`, nil},
		{`{"a.example.com":[]}`, nil},
		{`{"a.example.com":[{}]}`, nil},
		{`{"a.example.com":[{"transform":{}}]}`, nil},
		{ruleJSON("API.Example.com.", "Authorization", ruleValue), []service.HeaderRule{{Host: "api.example.com", Headers: one("Authorization")}}},
		{`{"*.example.com":[{"transform":{"headers":{"X-Key":"` + ruleValue + `"}}}],"b.test":[{},{"transform":{"headers":{"X-B":"` + ruleValue + `"}}}]}`,
			[]service.HeaderRule{{Host: "*.example.com", Headers: one("X-Key")}, {Host: "b.test", Headers: one("X-B")}}},
		{ruleJSON("10.0.0.1", "X-Key", ruleValue), []service.HeaderRule{{Host: "10.0.0.1", Headers: one("X-Key")}}},
		// Several headers: of one transform, and of several rules of the
		// host's list, sorted by name.
		{`{"a.test":[{"transform":{"headers":{"X-Org":"` + ruleValue + `","Authorization":"` + ruleValue + `"}}},{"transform":{"headers":{"X-B":"` + ruleValue + `"}}}]}`,
			[]service.HeaderRule{{Host: "a.test", Headers: []service.RuleHeader{{Name: "Authorization", Value: ruleValue}, {Name: "X-B", Value: ruleValue}, {Name: "X-Org", Value: ruleValue}}}}},
	}
	for _, tc := range ok {
		got, err := parseE2BRules(json.RawMessage(tc.raw))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseE2BRules(%s) = %+v, %v; want %+v", tc.raw, got, err, tc.want)
		}
	}
	many := map[string][]any{}
	for i := range service.MaxHeaderRules + 1 {
		many[fmt.Sprintf("h%d.test", i)] = []any{map[string]any{"transform": map[string]any{"headers": map[string]string{"X-K": ruleValue}}}}
	}
	tooMany, _ := json.Marshal(many)
	headers := map[string]string{}
	for i := range 17 {
		headers[fmt.Sprintf("X-H%02d", i)] = ruleValue
	}
	tooManyHeaders, _ := json.Marshal(map[string]any{"a.test": []any{map[string]any{"transform": map[string]any{"headers": headers}}}})
	bad := []struct{ raw, why string }{
		{`[]`, "want an object"},
		{`{"a.test":{}}`, "want an object"},
		{`{"a.test":[{"transform":{"headers":{"X-K":1}}}]}`, "rule 0"},
		{`{"a.test":[{"transform":{"headers":{"X-K":null}}}]}`, "want a string value"},
		{`{"a.test":[{"transform":{"query":{"k":"v"}}}]}`, "rule 0"},
		{`{"a.test":[{"match":{}}]}`, "rule 0"},
		{ruleJSON("*", "X-K", ruleValue), "not a host name"},
		{ruleJSON("", "X-K", ruleValue), "not a host name"},
		{ruleJSON("*.com", "X-K", ruleValue), `"*.com"`},
		{ruleJSON("10.0.0.0/8", "X-K", ruleValue), "10.0.0.0/8"},
		{ruleJSON("a b.test", "X-K", ruleValue), "a b.test"},
		{ruleJSON("a.test", "Host", ruleValue), "header Host"},
		{ruleJSON("a.test", "content-length", ruleValue), "frames or routes"},
		{ruleJSON("a.test", "Transfer-Encoding", ruleValue), "frames or routes"},
		{ruleJSON("a.test", "Connection", ruleValue), "frames or routes"},
		{ruleJSON("a.test", "Upgrade", ruleValue), "frames or routes"},
		{ruleJSON("a.test", "TE", ruleValue), "frames or routes"},
		{ruleJSON("a.test", "Proxy-Authorization", ruleValue), "frames or routes"},
		{ruleJSON("a.test", "Expect", ruleValue), "frames the request"},
		{ruleJSON("a.test", "X Bad", ruleValue), "token characters"},
		{ruleJSON("a.test", "X-K\r\nEvil", ruleValue), "token characters"},
		{ruleJSON("a.test", "X-K", ruleValue+"\r\nX-Evil: 1"), "CR, LF or NUL"},
		{ruleJSON("a.test", "X-K", ruleValue+"\n"), "CR, LF or NUL"},
		{ruleJSON("a.test", "X-K", ruleValue+"\x01"), "control character"},
		{ruleJSON("a.test", "X-K", "short"), "fewer than 8"},
		{ruleJSON("a.test", "X-K", strings.Repeat("v", maxE2BRuleValue+1)), "more than"},
		{`{"a.test":[{"transform":{"headers":{"X-A":"` + ruleValue + `"}}},{"transform":{"headers":{"x-a":"` + ruleValue + `"}}}]}`, "sets header x-a twice"},
		{`{"a.test":[{"transform":{"headers":{"X-A":"` + ruleValue + `","X-A ":"` + ruleValue + `"}}}]}`, "token characters"},
		{string(tooManyHeaders), "more than 16 headers"},
		{ruleJSON("a.test", "Authorization", "Bearer ${e2b.secrets.openai-key}"), "an E2B secret (Secret.fill)"},
		{ruleJSON("a.test", "Authorization", "Bearer ${e2b.identity.tokens.aws}"), "workload identity token"},
		{`{"A.test":[],"a.test":[]}`, "listed twice"},
		{string(tooMany), "more than 32"},
	}
	for _, tc := range bad {
		got, err := parseE2BRules(json.RawMessage(tc.raw))
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("parseE2BRules(%.80s) = %+v, %v; want an InvalidArgument saying %q", tc.raw, got, err, tc.why)
			continue
		}
		if strings.Contains(err.Error(), ruleValue) {
			t.Errorf("parseE2BRules(%.80s): the error quotes the value: %v", tc.raw, err)
		}
	}
}

// TestE2BRulesOnCreateAndUpdate: rules ride in a create's network (any
// case of the name) and are no longer refused there.
func TestE2BRulesOnCreateAndUpdate(t *testing.T) {
	network := json.RawMessage(`{"Rules":` + ruleJSON("a.test", "X-K", ruleValue) + `}`)
	if _, err := parseE2BNetwork(network, nil); err != nil {
		t.Fatalf("parseE2BNetwork with rules: %v", err)
	}
	got, err := parseE2BRules(e2bRulesField(network))
	if err != nil || len(got) != 1 || got[0].Host != "a.test" {
		t.Fatalf("rules of %s = %+v, %v", network, got, err)
	}
}

func FuzzParseE2BRules(f *testing.F) {
	f.Add(ruleJSON("a.example.com", "Authorization", ruleValue))
	f.Add(ruleJSON("*.example.com", "X-Key", ruleValue))
	f.Add(`{"a.test":[{},{"transform":{"headers":{"X-B":"` + ruleValue + `"}}}]}`)
	f.Add(`{"a.test":[{"transform":{"headers":{"Host":"` + ruleValue + `"}}}]}`)
	f.Add(`{"a.test":[{"transform":{"headers":{"X":"` + ruleValue + `\r\nY: z"}}}]}`)
	f.Add(`{"A.test":[],"a.test.":[]}`)
	f.Add(`{"a.test":[{"transform":{"headers":{"X-A":"` + ruleValue + `","X-B":"` + ruleValue + `"}}},{"transform":{"headers":{"x-a":"` + ruleValue + `"}}}]}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, raw string) {
		rules, err := parseE2BRules(json.RawMessage(raw))
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("parseE2BRules(%q): %v, not InvalidArgument", raw, err)
			}
			return
		}
		if len(rules) > service.MaxHeaderRules {
			t.Fatalf("parseE2BRules(%q): %d rules", raw, len(rules))
		}
		hosts := map[string]bool{}
		for _, r := range rules {
			if hosts[r.Host] || r.Host != strings.ToLower(r.Host) || r.Host == "" || r.Host == "*" {
				t.Fatalf("parseE2BRules(%q): host %q repeated, empty or not lowercase", raw, r.Host)
			}
			hosts[r.Host] = true
			if len(r.Headers) == 0 || len(r.Headers) > 16 {
				t.Fatalf("parseE2BRules(%q): %d headers for %s", raw, len(r.Headers), r.Host)
			}
			names := map[string]bool{}
			for _, h := range r.Headers {
				if e2bHopByHop[http.CanonicalHeaderKey(h.Name)] || strings.ContainsAny(h.Name, " :,\r\n\x00") || h.Name == "" || names[http.CanonicalHeaderKey(h.Name)] {
					t.Fatalf("parseE2BRules(%q): header name %q accepted", raw, h.Name)
				}
				names[http.CanonicalHeaderKey(h.Name)] = true
				if len(h.Value) < 8 || len(h.Value) > maxE2BRuleValue || strings.ContainsAny(h.Value, "\r\n\x00\x7f") {
					t.Fatalf("parseE2BRules(%q): value of %d bytes %q accepted", raw, len(h.Value), h.Value)
				}
			}
		}
	})
}
