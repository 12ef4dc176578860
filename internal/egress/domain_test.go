package egress

import "testing"

func TestDomainRuleMatch(t *testing.T) {
	tests := []struct {
		rule, name string
		match      bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "www.example.com", false},
		{"example.com", "notexample.com", false},
		{"*.example.com", "example.com", false}, // not the apex
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "a.b.c.example.com", true}, // any depth
		{"*.example.com", "aexample.com", false},
		{"*.example.com", "a.example.com.evil.net", false},
		{"*.example.com", ".example.com", false},
		{"*.co.uk", "example.co.uk", true},
		{"*.co.uk", "co.uk", false},
		{"example.com.", "example.com", true}, // trailing dot in the rule
	}
	for _, tc := range tests {
		t.Run(tc.rule+"~"+tc.name, func(t *testing.T) {
			r, err := parseDomainRule(tc.rule, true)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.match(tc.name); got != tc.match {
				t.Fatalf("%s.match(%q) = %v, want %v", r, tc.name, got, tc.match)
			}
		})
	}
	// A TLD wildcard is refused in allow lists and accepted in deny lists.
	if _, err := parseDomainRule("*.com", true); err == nil {
		t.Error(`parseDomainRule("*.com", allow) succeeded, want refused as too broad`)
	}
	if r, err := parseDomainRule("*.zip", false); err != nil || !r.match("a.zip") || r.match("zip") {
		t.Errorf(`parseDomainRule("*.zip", deny) = %v, %v; want a rule matching a.zip and not zip`, r, err)
	}
}
