package service

// Header rules: the headers a sandbox's outbound HTTPS requests to named
// hosts get on the way out (E2B's network.rules), kept as sandbox-scoped
// credentials, one per host: with the header method for one header, the
// headers method (several headers, each value redacted on its own) for
// more. One credential a host, not one a header: the gateway resolves one
// credential per request, and one store write then switches all of a
// host's headers at once.
//
// Why credentials and not a rule set of their own: a credential already is
// "this header, with this value, on HTTPS requests of this sandbox to this
// host", and everything around it is already built and tested: the value
// sealed in the credential backend and never in the sandbox, an answer or
// a log; the gateway intercepting only the hosts a credential names; the
// value removed from responses; the audit log; header names and values
// that frame the request refused. A second rule set would need all of it
// again, and a second place the gateway asks.
//
// Each rule's credential id is derived from the sandbox and the host
// (headerRuleID), so that a replacement is one backend Put per host: a
// request to a host sees the old rule or the new one, never both and never
// neither. Hosts the new set no longer names are removed after the new
// rules are in. Within the sandbox scope the credential manager's host
// precedence is E2B's: an exact name beats a wildcard, a longer wildcard a
// shorter one.
//
// The rules go with the sandbox: the reconciler's delete removes them
// (PurgeHeaderRules) before it removes the row, and retries when it cannot.
// A fork gets a copy (CopyHeaderRules), as it gets its parent's egress
// policy.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/credentials"
	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/store"
)

// HeaderRule is the headers a sandbox's HTTPS requests to Host carry.
type HeaderRule struct {
	// Host is an exact name, an address or "*.suffix", in lowercase.
	Host string
	// Headers are set on the request, each replacing whatever the sandbox
	// sent in it: 1 to credentials.MaxInjectedHeaders, sorted by name.
	Headers []RuleHeader
}

// RuleHeader is one header of a HeaderRule; Value is empty in listings.
type RuleHeader struct {
	Name, Value string
}

// MaxHeaderRules bounds the hosts of one sandbox's rules.
const MaxHeaderRules = 32

// headerRulePrefix starts the credential id of every header rule.
const headerRulePrefix = "hr-"

// headerRuleID is the credential id of sandbox id's rule for host: the
// same for every version of the rule.
func headerRuleID(id, host string) string {
	sum := sha256.Sum256([]byte(id + "\x00" + host))
	return headerRulePrefix + id + "-" + hex.EncodeToString(sum[:8])
}

// headerRuleCredential is rule r of sb as a credential: method header for
// one header, headers for several.
func headerRuleCredential(sb *sandbox.Sandbox, r HeaderRule) credentials.Credential {
	name := "e2b network.rules " + r.Host
	if len(name) > credentials.MaxIDLen {
		name = name[:credentials.MaxIDLen]
	}
	inj := credentials.Injection{Method: credentials.MethodHeader}
	names := make([]string, len(r.Headers))
	values := make([]string, len(r.Headers))
	for i, h := range r.Headers {
		names[i], values[i] = h.Name, h.Value
	}
	if len(r.Headers) == 1 {
		inj.Name = names[0]
	} else {
		inj = credentials.Injection{Method: credentials.MethodHeaders, Name: strings.Join(names, ",")}
	}
	return credentials.Credential{
		ID:           headerRuleID(sb.ID, r.Host),
		Scope:        credentials.Scope{Tenant: sb.Tenant, Sandbox: sb.ID},
		Name:         name,
		Secret:       []byte(strings.Join(values, "\n")),
		Injection:    inj,
		AllowedHosts: []string{r.Host},
	}
}

// ruleHeaders reads the headers of a header rule's credential c back:
// their names, and their values when withValues.
func ruleHeaders(c *credentials.Credential, withValues bool) ([]RuleHeader, error) {
	switch c.Injection.Method {
	case credentials.MethodHeader:
		h := RuleHeader{Name: c.Injection.Name}
		if withValues {
			h.Value = string(c.Secret)
		}
		return []RuleHeader{h}, nil
	case credentials.MethodHeaders:
		names := strings.Split(c.Injection.Name, ",")
		var values [][]byte
		if withValues {
			_, vs, err := c.InjectedHeaders()
			if err != nil {
				return nil, err
			}
			values = vs
		}
		out := make([]RuleHeader, len(names))
		for i, n := range names {
			out[i].Name = n
			if withValues {
				out[i].Value = string(values[i])
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("injection method %.32q is not a header rule's", c.Injection.Method)
}

// ValidateHeaderRules checks rules as ReplaceHeaderRules would store them;
// the error is InvalidArgument, names the host and never quotes a value.
func ValidateHeaderRules(rules []HeaderRule) error {
	if len(rules) > MaxHeaderRules {
		return fmt.Errorf("%w: %d hosts with header rules, more than %d", errdefs.ErrInvalidArgument, len(rules), MaxHeaderRules)
	}
	probe := &sandbox.Sandbox{ID: "probe", Tenant: "probe"}
	seen := make(map[string]bool, len(rules))
	for _, r := range rules {
		if seen[r.Host] {
			return fmt.Errorf("%w: host %q has two header rules", errdefs.ErrInvalidArgument, Clip(r.Host))
		}
		seen[r.Host] = true
		if len(r.Headers) == 0 || len(r.Headers) > credentials.MaxInjectedHeaders {
			return fmt.Errorf("%w: host %q: %d headers, want 1 to %d", errdefs.ErrInvalidArgument, Clip(r.Host), len(r.Headers), credentials.MaxInjectedHeaders)
		}
		c := headerRuleCredential(probe, r)
		if err := c.Validate(); err != nil {
			return fmt.Errorf("%w: host %q: %s", errdefs.ErrInvalidArgument, Clip(r.Host), strings.TrimPrefix(err.Error(), "credential "+c.ID+": "))
		}
	}
	return nil
}

// ReplaceHeaderRules makes rules sb's header rules, in place of the ones it
// had (none: it has none after). sb is the caller's, already loaded.
func (s *Credentials) ReplaceHeaderRules(ctx context.Context, sb *sandbox.Sandbox, rules []HeaderRule) error {
	if err := ValidateHeaderRules(rules); err != nil {
		return err
	}
	if s.backend == nil {
		if len(rules) == 0 {
			return nil
		}
		return fmt.Errorf("sandbox %s: header rules are kept as credentials: %w", sb.ID, ErrNoCredentials)
	}
	unlock := s.ruleLocks.Lock(sb.ID)
	defer unlock()
	// Under the lock PurgeHeaderRules takes: a sandbox being deleted
	// gets no rule its delete would not see.
	if cur, err := s.store.GetSandboxByID(ctx, sb.ID); errors.Is(err, errdefs.ErrNotFound) ||
		err == nil && (cur.State == sandbox.StateDeleting || cur.State == sandbox.StateDeleted) {
		return fmt.Errorf("%w: sandbox %s is being deleted", errdefs.ErrNotFound, sb.ID)
	} else if err != nil {
		return err
	}
	old, err := s.headerRuleRows(ctx, sb)
	if err != nil {
		return err
	}
	keep := make(map[string]bool, len(rules))
	for _, r := range rules {
		c := headerRuleCredential(sb, r)
		keep[c.ID] = true
		if err := s.putHeaderRule(ctx, c, slices.ContainsFunc(old, func(o store.Credential) bool { return o.ID == c.ID })); err != nil {
			return fmt.Errorf("sandbox %s: header rule for %s: %w", sb.ID, r.Host, err)
		}
	}
	for _, o := range old {
		if !keep[o.ID] {
			if err := s.delete(ctx, o.ID); err != nil {
				return fmt.Errorf("sandbox %s: remove a replaced header rule: %w", sb.ID, err)
			}
		}
	}
	s.log.Info("header rules set", "sandbox", sb.ID, "hosts", len(rules))
	return nil
}

// putHeaderRule stores c (its secret zeroed after): the backend first, so
// that a request sees the new value at once, then its index entry
// (replaced when it existed, its header name may have changed).
func (s *Credentials) putHeaderRule(ctx context.Context, c credentials.Credential, existed bool) error {
	defer c.Zero()
	meta, err := json.Marshal(c.Metadata())
	if err != nil {
		return fmt.Errorf("encode metadata: %w", err)
	}
	row := store.Credential{ID: c.ID, Tenant: c.Scope.Tenant, Sandbox: c.Scope.Sandbox, Name: c.Name,
		Metadata: string(meta), CreatedAt: time.Now().UTC()}
	if !existed {
		// Index first, as Create does: what the backend can hand out is
		// always listed.
		if err := s.store.CreateCredential(ctx, row); err != nil {
			return err
		}
	}
	if err := s.backend.Put(ctx, c); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if existed {
		if err := s.store.DeleteCredential(ctx, c.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		return s.store.CreateCredential(ctx, row)
	}
	return nil
}

// headerRuleRows are the index entries of sb's header rules.
func (s *Credentials) headerRuleRows(ctx context.Context, sb *sandbox.Sandbox) ([]store.Credential, error) {
	rows, err := s.store.ListCredentials(ctx, sb.Tenant)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: list its header rules: %w", sb.ID, err)
	}
	prefix := headerRulePrefix + sb.ID + "-"
	return slices.DeleteFunc(rows, func(r store.Credential) bool {
		return r.Sandbox != sb.ID || !strings.HasPrefix(r.ID, prefix)
	}), nil
}

// HeaderRules returns sb's header rules without their values: the host
// and the header name of each, by host.
func (s *Credentials) HeaderRules(ctx context.Context, sb *sandbox.Sandbox) ([]HeaderRule, error) {
	if s.backend == nil {
		return nil, nil
	}
	rows, err := s.headerRuleRows(ctx, sb)
	if err != nil {
		return nil, err
	}
	var out []HeaderRule
	for _, row := range rows {
		var m credentials.Credential
		if err := json.Unmarshal([]byte(row.Metadata), &m); err != nil || len(m.AllowedHosts) != 1 {
			return nil, fmt.Errorf("sandbox %s: header rule %s: unreadable metadata", sb.ID, row.ID)
		}
		hs, err := ruleHeaders(&m, false)
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: header rule %s: %w", sb.ID, row.ID, err)
		}
		out = append(out, HeaderRule{Host: m.AllowedHosts[0], Headers: hs})
	}
	slices.SortFunc(out, func(a, b HeaderRule) int { return strings.Compare(a.Host, b.Host) })
	return out, nil
}

// CopyHeaderRules gives sandbox to (a fork of from) from's header rules.
func (s *Credentials) CopyHeaderRules(ctx context.Context, from, to *sandbox.Sandbox) error {
	if s.backend == nil {
		return nil
	}
	rows, err := s.headerRuleRows(ctx, from)
	if err != nil {
		return err
	}
	var rules []HeaderRule
	defer func() {
		for i := range rules {
			for j := range rules[i].Headers {
				rules[i].Headers[j].Value = ""
			}
		}
	}()
	for _, row := range rows {
		c, err := s.backend.Get(ctx, row.ID)
		if err != nil {
			return fmt.Errorf("sandbox %s: copy header rule %s from %s: %w", to.ID, row.ID, from.ID, err)
		}
		hs, herr := ruleHeaders(c, true)
		if herr == nil && len(c.AllowedHosts) == 1 {
			rules = append(rules, HeaderRule{Host: c.AllowedHosts[0], Headers: hs})
		}
		c.Zero()
		if herr != nil {
			return fmt.Errorf("sandbox %s: copy header rule %s from %s: %w", to.ID, row.ID, from.ID, herr)
		}
	}
	if len(rules) == 0 {
		return nil
	}
	return s.ReplaceHeaderRules(ctx, to, rules)
}

// PurgeHeaderRules removes sb's header rules: the reconciler calls it when
// it deletes sb.
func (s *Credentials) PurgeHeaderRules(ctx context.Context, sb *sandbox.Sandbox) error {
	if s.backend == nil {
		return nil
	}
	unlock := s.ruleLocks.Lock(sb.ID)
	defer unlock()
	rows, err := s.headerRuleRows(ctx, sb)
	if err != nil {
		return err
	}
	for _, row := range rows {
		if err := s.delete(ctx, row.ID); err != nil {
			return fmt.Errorf("sandbox %s: remove its header rules: %w", sb.ID, err)
		}
	}
	return nil
}
