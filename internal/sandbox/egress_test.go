package sandbox

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/egress"
	"github.com/spacesandbox/space/internal/errdefs"
)

func mustPolicy(t *testing.T, js string) *egress.Policy {
	t.Helper()
	p, err := egress.ParsePolicy([]byte(js))
	if err != nil {
		t.Fatalf("ParsePolicy(%s): %v", js, err)
	}
	return p
}

func TestCreateEgress(t *testing.T) {
	def := mustPolicy(t, `{"allow_internet":false,"allow":{"domains":["example.com"]}}`)
	yes, no := true, false
	tests := []struct {
		name     string
		raw      string
		shortcut *bool
		want     *egress.Spec // nil: def itself
		errSub   string
	}{
		{name: "neither: the default", raw: ""},
		{name: "null: the default", raw: "null"},
		{name: "policy", raw: `{"allow_internet":true,"deny":{"ports":["25"]}}`,
			want: &egress.Spec{AllowInternet: true, Allow: egress.RuleSet{}, Deny: egress.RuleSet{Ports: []string{"25"}}}},
		{name: "shorthand false", shortcut: &no, want: &egress.Spec{}},
		{name: "shorthand true", shortcut: &yes, want: &egress.Spec{AllowInternet: true}},
		{name: "shorthand agrees", raw: `{"allow_internet":false}`, shortcut: &no, want: &egress.Spec{}},
		{name: "shorthand contradicts", raw: `{"allow_internet":true}`, shortcut: &no, errSub: "contradicts"},
		{name: "unknown field", raw: `{"alow":{}}`, errSub: `unknown field "alow"`},
		{name: "bad cidr", raw: `{"allow":{"cidrs":["10.0.0.1/8"]}}`, errSub: "allow.cidrs[0]"},
		{name: "trailing data", raw: `{} {}`, errSub: "trailing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CreateEgress(json.RawMessage(tt.raw), tt.shortcut, def)
			if tt.errSub != "" {
				if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tt.errSub) {
					t.Fatalf("err = %v, want ErrInvalidArgument containing %q", err, tt.errSub)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == nil {
				if got != def {
					t.Fatalf("got %+v, want the default", got.Spec())
				}
				return
			}
			if g := got.Spec(); string(mustJSON(t, g)) != string(mustJSON(t, *tt.want)) {
				t.Errorf("spec = %s, want %s", mustJSON(t, g), mustJSON(t, *tt.want))
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEgressWireForm: the API type and egress.Spec have one JSON form, so
// what a client sends parses, and what the server reports reads back the same.
func TestEgressWireForm(t *testing.T) {
	in := sandboxv1.EgressPolicy{
		AllowInternet: true,
		Allow:         sandboxv1.EgressRules{Domains: []string{"*.pypi.org"}, CIDRs: []string{"203.0.113.0/24"}, Ports: []string{"443", "8000-8100"}},
		Deny:          sandboxv1.EgressRules{Domains: []string{"evil.example.com"}, CIDRs: []string{"2001:db8::/32"}, Ports: []string{"25"}},
	}
	p, err := egress.ParsePolicy(mustJSON(t, in))
	if err != nil {
		t.Fatalf("the API form does not parse: %v", err)
	}
	if out := EgressAPI(p); !reflect.DeepEqual(*out, in) {
		t.Errorf("EgressAPI = %+v, want %+v", *out, in)
	}
	back, err := egress.ParsePolicy(EgressJSON(p))
	if err != nil || !reflect.DeepEqual(back.Spec(), p.Spec()) {
		t.Errorf("EgressJSON does not round-trip: %s, %v", EgressJSON(p), err)
	}
	// An empty rule list is left out of the API form.
	if b := mustJSON(t, EgressAPI(DefaultEgress())); string(b) != `{"allow_internet":true}` {
		t.Errorf("default policy in the API = %s", b)
	}
	// The zero policy (nil) denies everything.
	if b := EgressJSON(nil); !strings.Contains(string(b), `"allow_internet":false`) {
		t.Errorf("EgressJSON(nil) = %s, want allow_internet false", b)
	}
}

func TestSandboxCarriesEgress(t *testing.T) {
	p := mustPolicy(t, `{"allow_internet":false,"allow":{"domains":["example.com"]}}`)
	sb := New("t-aaaaaaaaaaaaaaaa", Spec{Template: "minimal", Egress: p}, time.Now())
	if sb.Egress != p || sb.Clone().Egress != p {
		t.Fatal("New or Clone lost the policy")
	}
	if got := sb.API().Egress; got == nil || got.AllowInternet || len(got.Allow.Domains) != 1 {
		t.Errorf("API().Egress = %+v", got)
	}
	def := DefaultEgress()
	if sb.EgressOr(def) != p {
		t.Error("EgressOr replaced the sandbox's own policy")
	}
	old := New("t-aaaaaaaaaaaaaaaa", Spec{Template: "minimal"}, time.Now())
	if old.EgressOr(def) != def || old.API().Egress != nil {
		t.Error("a sandbox without a policy does not follow the default")
	}
}

// FuzzCreateEgress: whatever a create request carries, an accepted policy
// survives the trips it makes (the store's JSON, the API's form) unchanged,
// and a refused one is an invalid argument.
func FuzzCreateEgress(f *testing.F) {
	f.Add([]byte(`{"allow_internet":true}`), byte(0))
	f.Add([]byte(`{"allow_internet":false,"allow":{"domains":["*.pypi.org"],"cidrs":["10.1.0.0/16"],"ports":["443","8000-8100"]},"deny":{"domains":["evil.example.com"],"cidrs":["2001:db8::/32"],"ports":["25"]}}`), byte(1))
	f.Add([]byte(`null`), byte(2))
	f.Add([]byte(``), byte(1))
	f.Fuzz(func(t *testing.T, raw []byte, shorthand byte) {
		var ai *bool
		switch shorthand % 3 {
		case 1:
			v := true
			ai = &v
		case 2:
			v := false
			ai = &v
		}
		def := DefaultEgress()
		p, err := CreateEgress(raw, ai, def)
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("refusal is not an invalid argument: %v", err)
			}
			return
		}
		stored, err := egress.ParsePolicy(EgressJSON(p))
		if err != nil || !reflect.DeepEqual(stored.Spec(), p.Spec()) {
			t.Fatalf("stored form %s does not read back: %v", EgressJSON(p), err)
		}
		api, err := json.Marshal(EgressAPI(p))
		if err != nil {
			t.Fatal(err)
		}
		shown, err := egress.ParsePolicy(api)
		if err != nil || !reflect.DeepEqual(shown.Spec(), p.Spec()) {
			t.Fatalf("API form %s does not read back as %s: %v", api, EgressJSON(p), err)
		}
	})
}
