package e2bapi

// E2B's network.rules: per-domain header injection on a sandbox's outbound
// HTTPS requests ({"api.example.com": [{"transform": {"headers": {"X-Key":
// "v"}}}]}), on create and replaced by sbx.updateNetwork. SPACE keeps them
// as sandbox-scoped credentials (service.ReplaceHeaderRules says why), so
// the gateway injects them as it injects any credential: the value never
// enters the sandbox, is removed from responses, and is in no answer or
// log (getInfo lists each host with its header name and an empty value).
//
// As on E2B: keys are exact names or "*.suffix", in any case (kept in
// lowercase); an exact name beats a wildcard, the longest wildcard the
// others; the rules open no egress (allowOut does). What SPACE refuses
// that E2B takes, each with a 400 naming the host: more than 16 headers a
// host or one header set twice, a value shorter than 8 bytes (the
// gateway removes the value from responses, and a shorter one matches
// ordinary text), a wildcard of a top-level domain ("*.com"), a CIDR key.
// Everywhere: headers that frame or route the request (Host,
// Content-Length, Transfer-Encoding, the hop-by-hop headers), names that
// are not HTTP tokens, values with control characters (CR, LF).
//
// A fork (sbx.fork) gets its parent's rules, as it gets its egress policy;
// a create from a snapshot gets the rules its own network field names.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// maxE2BRuleValue bounds one injected header value.
const maxE2BRuleValue = 8 << 10

// e2bHopByHop are the headers of RFC 9110 §7.6.1 that act on one hop:
// the gateway owns them, a rule may not set them. (The credential checks
// refuse Host and the framing headers too.)
var e2bHopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Host": true, "Content-Length": true,
}

// e2bRuleJSON is one rule of a host's list.
type e2bRuleJSON struct {
	Transform *struct {
		Headers map[string]*string `json:"headers"`
	} `json:"transform"`
}

// parseE2BRules reads E2B's rules (raw: the value of network.rules) into
// SPACE's header rules, by host. null or absent is none. Errors are
// InvalidArgument, name the host and header, and never quote a value.
func parseE2BRules(raw json.RawMessage) ([]service.HeaderRule, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return nil, nil
	}
	var hosts map[string][]json.RawMessage
	if err := json.Unmarshal(raw, &hosts); err != nil {
		return nil, fmt.Errorf("%w: network.rules: want an object of host to a list of rules: %v", errdefs.ErrInvalidArgument, err)
	}
	if len(hosts) > service.MaxHeaderRules {
		return nil, fmt.Errorf("%w: network.rules: %d hosts, more than %d", errdefs.ErrInvalidArgument, len(hosts), service.MaxHeaderRules)
	}
	var out []service.HeaderRule
	seen := make(map[string]bool, len(hosts))
	for _, key := range slices.Sorted(maps.Keys(hosts)) {
		host := strings.TrimSuffix(strings.ToLower(key), ".")
		if seen[host] {
			return nil, fmt.Errorf("%w: network.rules: %q is listed twice (keys are not case-sensitive)", errdefs.ErrInvalidArgument, service.Clip(key))
		}
		seen[host] = true
		r, ok, err := parseE2BHostRules(key, hosts[key])
		if err != nil {
			return nil, err
		}
		if ok {
			r.Host = host
			out = append(out, r)
		}
	}
	if err := service.ValidateHeaderRules(out); err != nil {
		return nil, fmt.Errorf("network.rules: %w", err)
	}
	return out, nil
}

// parseE2BHostRules reads the list of rules of host key: ok false when it
// sets no header. The headers of every rule of the list are the host's,
// as E2B applies a host's rules in order; a header set twice (names match
// in any case) is refused rather than one of its values picked.
func parseE2BHostRules(key string, list []json.RawMessage) (r service.HeaderRule, ok bool, err error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: network.rules[%q]: "+format, append([]any{errdefs.ErrInvalidArgument, service.Clip(key)}, args...)...)
	}
	if key == "" || key == "*" {
		return r, false, bad("not a host name; give an exact name or *.example.com")
	}
	seen := map[string]bool{}
	for i, raw := range list {
		var rule e2bRuleJSON
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rule); err != nil {
			return r, false, bad("rule %d: want {\"transform\": {\"headers\": {...}}}: %v", i, err)
		}
		if rule.Transform == nil {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(rule.Transform.Headers)) {
			v := rule.Transform.Headers[name]
			if v == nil {
				return r, false, bad("header %q: want a string value", service.Clip(name))
			}
			canon := http.CanonicalHeaderKey(name)
			if seen[canon] {
				return r, false, bad("sets header %s twice (header names match in any case): keep one", service.Clip(name))
			}
			seen[canon] = true
			if len(seen) > credentials.MaxInjectedHeaders {
				return r, false, bad("sets more than %d headers", credentials.MaxInjectedHeaders)
			}
			if err := checkE2BRuleHeader(name, *v); err != nil {
				return r, false, bad("%s", err)
			}
			r.Headers = append(r.Headers, service.RuleHeader{Name: name, Value: *v})
		}
	}
	slices.SortFunc(r.Headers, func(a, b service.RuleHeader) int { return strings.Compare(a.Name, b.Name) })
	return r, len(r.Headers) > 0, nil
}

// checkE2BRuleHeader checks one header a rule sets; the error never
// quotes the value.
func checkE2BRuleHeader(name, value string) error {
	if e2bHopByHop[http.CanonicalHeaderKey(name)] {
		return fmt.Errorf("header %s frames or routes the request and belongs to the gateway; a rule cannot set it", service.Clip(name))
	}
	if len(value) < credentials.MinSecretLen {
		return fmt.Errorf("header %s: a value of %d bytes, fewer than %d: the gateway removes the value from the responses the sandbox reads, and a shorter one would match ordinary text", service.Clip(name), len(value), credentials.MinSecretLen)
	}
	if len(value) > maxE2BRuleValue {
		return fmt.Errorf("header %s: a value of %d bytes, more than %d", service.Clip(name), len(value), maxE2BRuleValue)
	}
	if strings.ContainsAny(value, "\r\n\x00") {
		return fmt.Errorf("header %s: the value contains CR, LF or NUL, which would split the request", service.Clip(name))
	}
	// Secret.fill(NAME) and an iam token put E2B's placeholders in the
	// value for E2B's proxy to resolve; SPACE has neither E2B secrets nor
	// workload tokens, and would send the placeholder text as the value.
	for _, p := range []struct{ prefix, what string }{
		{"${e2b.secrets.", "an E2B secret (Secret.fill): SPACE keeps no E2B secrets; put the value itself in the rule (it never enters the sandbox)"},
		{"${e2b.identity.", "an E2B workload identity token (iam): SPACE mints none"},
	} {
		if strings.Contains(value, p.prefix) {
			return fmt.Errorf("header %s: the value names %s", service.Clip(name), p.what)
		}
	}
	return nil
}

// e2bRulesField is the raw rules field of a create's network ("": none),
// matched in any case as parseE2BNetwork matches names.
func e2bRulesField(network json.RawMessage) json.RawMessage {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(network, &fields); err != nil {
		return nil // parseE2BNetwork has refused it
	}
	for name, v := range fields {
		if strings.EqualFold(name, "rules") {
			return v
		}
	}
	return nil
}

// e2bSetRules makes rules sb's header rules. When they cannot be stored on
// a create (created true) the sandbox is deleted and the error answered: a
// sandbox without the headers it was created with would fail at its
// upstreams in ways hard to trace.
func (a *API) e2bSetRules(ctx context.Context, c service.Caller, sb *sandbox.Sandbox, rules []service.HeaderRule, created bool) error {
	if a.creds == nil {
		if len(rules) == 0 {
			return nil
		}
		return fmt.Errorf("network.rules: %w", service.ErrNoCredentials)
	}
	err := a.creds.ReplaceHeaderRules(ctx, sb, rules)
	if err != nil && created {
		if derr := a.svc.Delete(ctx, c, sb.ID); derr != nil && !errors.Is(derr, service.ErrStillWorking) {
			a.log.Warn("e2b: delete a sandbox whose network.rules were not stored", "sandbox", sb.ID, "err", derr)
		}
		return fmt.Errorf("sandbox %s: store its network.rules (deleted the sandbox): %w", sb.ID, err)
	}
	return err
}

// e2bCopyRules gives fork child its parent's rules; when it cannot, the
// child is deleted and the error is that child's result.
func (a *API) e2bCopyRules(ctx context.Context, c service.Caller, parent, child *sandbox.Sandbox) error {
	if err := a.creds.CopyHeaderRules(ctx, parent, child); err != nil {
		if derr := a.svc.Delete(ctx, c, child.ID); derr != nil && !errors.Is(derr, service.ErrStillWorking) {
			a.log.Warn("e2b: delete a fork whose network.rules were not copied", "sandbox", child.ID, "err", derr)
		}
		return fmt.Errorf("sandbox %s: copy network.rules from %s (deleted the fork): %w", child.ID, parent.ID, err)
	}
	return nil
}

// e2bRulesInfo is what getInfo says of sb's rules: each host with its
// header name and an empty value (the value is write-only). nil: none.
func (a *API) e2bRulesInfo(ctx context.Context, sb *sandbox.Sandbox) (map[string][]e2bRuleInfo, error) {
	if a.creds == nil {
		return nil, nil
	}
	rules, err := a.creds.HeaderRules(ctx, sb)
	if err != nil || len(rules) == 0 {
		return nil, err
	}
	out := make(map[string][]e2bRuleInfo, len(rules))
	for _, r := range rules {
		names := make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			names[h.Name] = ""
		}
		out[r.Host] = []e2bRuleInfo{{Transform: e2bTransformInfo{Headers: names}}}
	}
	return out, nil
}

// e2bRuleInfo is one rule in getInfo's network.rules.
type e2bRuleInfo struct {
	Transform e2bTransformInfo `json:"transform"`
}

// e2bTransformInfo is a rule's transform in getInfo: header names only.
type e2bTransformInfo struct {
	Headers map[string]string `json:"headers"`
}
