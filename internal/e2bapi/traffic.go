package e2bapi

// E2B's port semantics, for sandboxes made through the E2B API.
//
// On E2B every HTTP port of a sandbox is reachable through the proxy
// ({port}-{id}.{domain}, or E2b-Sandbox-Id and E2b-Sandbox-Port) by anyone
// with the URL, unless the sandbox was created with
// network.allowPublicTraffic false: then every request needs the header
// e2b-traffic-access-token carrying the trafficAccessToken that create and
// connect answer. Port 49983 (envd) is not one of these ports: it keeps its
// X-Access-Token (proxy.go).
//
// SPACE records this as one ServicePort row of the sandbox for port 0,
// "any HTTP port" (AnyPort): protocol http, public as asked. The ingress
// looks for the exact port first, so a port exposed with `space port
// expose` keeps its own rules, and falls back to that row for HTTP only (a
// TCP tunnel needs an exposed tcp port). A sandbox made through SPACE's own
// API has no such row, and its unexposed ports answer 404 as before. SPACE's
// own API takes ports 1-65535 only, so it can neither make nor remove the
// row.
//
// The traffic token is a MAC of the sandbox id, like the envd token
// (e2bMAC, under its own label), not a random token kept hashed in the row:
// connect must hand it out again, and a stored hash would be a second truth
// that can disagree with the derivation (a server without a sealing key
// derives a new key at each start, and then connect's token would be
// refused). The row's token hash stays empty, so SPACE's X-Space-Port-Token
// never opens it; the owning tenant's API key does, as for any private port.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/service"
)

// AnyPort is the port of the ServicePort row that stands for every HTTP
// port of a sandbox made through the E2B API.
const AnyPort = service.AnyPort

// TrafficHeader carries the traffic access token (E2B's
// e2b-traffic-access-token, in canonical form).
const TrafficHeader = "E2b-Traffic-Access-Token"

// e2bTrafficLabel separates the traffic token from the envd token and any
// other MAC under the same key.
const e2bTrafficLabel = "space e2b traffic access token v1\x00"

// TrafficToken is the trafficAccessToken of sandbox id.
func (a *API) TrafficToken(id string) string { return a.e2bMAC(e2bTrafficLabel, id) }

// TrafficTokenValid reports, in constant time, whether token is sandbox
// id's traffic access token.
func (a *API) TrafficTokenValid(id, token string) bool {
	return macEqual(token, a.TrafficToken(id))
}

// e2bTrafficOf is the trafficAccessToken an answer carries for sandbox id:
// nil (JSON null) when its ports are public.
func (a *API) e2bTrafficOf(id string, public bool) *string {
	if public {
		return nil
	}
	tok := a.TrafficToken(id)
	return &tok
}

// parseE2BNetwork reads the network field of an E2B create and returns
// the sandbox's rule for every HTTP port: public (E2B's
// allowPublicTraffic, true when absent) and its host mask (E2B's
// maskRequestHost, parseHostMask). allowOut and denyOut are read by
// e2bCreateEgress (network.go); another field with a value is refused
// rather than dropped (e2bRefusedNetwork says why), and so is a private
// sandbox with secure false, as E2B refuses it. Field names match in any
// case, as E2B's server (Go's encoding/json) reads them, and any spelling
// saying false makes the ports private.
func parseE2BNetwork(raw json.RawMessage, secure *bool) (rule service.HTTPPorts, err error) {
	rule.Public = true
	if t := bytes.TrimSpace(raw); len(t) == 0 || string(t) == "null" {
		return rule, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return service.HTTPPorts{}, fmt.Errorf("%w: network: want an object: %v", errdefs.ErrInvalidArgument, err)
	}
	// In order, so that the unsupported field named is always the same.
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		v := fields[name]
		switch {
		case strings.EqualFold(name, "allowPublicTraffic"):
			var p *bool
			if err := json.Unmarshal(v, &p); err != nil {
				return service.HTTPPorts{}, fmt.Errorf("%w: network.allowPublicTraffic: want true or false", errdefs.ErrInvalidArgument)
			}
			if p != nil && !*p {
				rule.Public = false
			}
		case strings.EqualFold(name, "allowOut") || strings.EqualFold(name, "denyOut"):
			// Egress rules: e2bCreateEgress (network.go).
		case strings.EqualFold(name, "rules"):
			// Header rules: parseE2BRules (rules.go).
		case strings.EqualFold(name, "maskRequestHost"):
			var m *string
			if err := json.Unmarshal(v, &m); err != nil {
				return service.HTTPPorts{}, fmt.Errorf("%w: network.maskRequestHost: want a string", errdefs.ErrInvalidArgument)
			}
			if m != nil && *m != "" {
				if rule.HostMask, err = parseHostMask(*m); err != nil {
					return service.HTTPPorts{}, err
				}
			}
		case isJSONEmpty(v):
			// An empty rules or httpsPorts asks for nothing.
		default:
			return service.HTTPPorts{}, e2bRefusedNetwork(name)
		}
	}
	if !rule.Public && secure != nil && !*secure {
		return service.HTTPPorts{}, fmt.Errorf("%w: a sandbox without public traffic (network.allowPublicTraffic false) needs secure access: do not set secure to false", errdefs.ErrInvalidArgument)
	}
	return rule, nil
}

// e2bRefusedNetwork is the 400 for a network field SPACE cannot do,
// saying why and what to use instead.
func e2bRefusedNetwork(name string) error {
	why := "SPACE does not know this field (allowPublicTraffic, allowOut, denyOut, rules and maskRequestHost are supported: docs/e2b.md)"
	switch {
	case strings.EqualFold(name, "egressProxy"):
		why = "SPACE's gateway sends a sandbox's traffic out directly and cannot tunnel it through a SOCKS5 proxy (E2B's open-source runtime refuses it too); restrict egress with allowOut/denyOut"
	case strings.EqualFold(name, "dnsServers"):
		why = "a sandbox's names are resolved by SPACE's own resolver, which its domain rules (allowOut) are decided by, so the DNS servers it may reach cannot be chosen; leave dnsServers out"
	case strings.EqualFold(name, "httpsPorts"):
		why = "SPACE's ingress speaks plain HTTP to a sandbox's ports; serve plain HTTP on the port (put TLS in front of SPACE's listener) or expose it as tcp and tunnel it (`space port expose --protocol tcp`)"
	}
	return fmt.Errorf("%w: network.%s is not supported by SPACE: %s", errdefs.ErrInvalidArgument, service.Clip(name), why)
}

// isJSONEmpty reports whether a JSON value asks for nothing: null, "", []
// or {}.
func isJSONEmpty(v json.RawMessage) bool {
	switch string(bytes.Join(bytes.Fields(v), nil)) {
	case "null", `""`, "[]", "{}":
		return true
	}
	return false
}

// e2bOpenPorts records the any-port rule of sandbox id, made through the
// E2B API: its HTTP ports public or behind the traffic token. When the rule
// cannot be recorded the sandbox is deleted, and the caller answers the
// error: a sandbox whose ports are not what was asked for is worse than
// none. Until the rule is there its ports answer 404, so nothing is open
// that should not be.
func (a *API) e2bOpenPorts(ctx context.Context, c service.Caller, id string, rule service.HTTPPorts) error {
	if err := a.svc.OpenHTTPPorts(ctx, c, id, rule); err != nil {
		if derr := a.svc.Delete(ctx, c, id); derr != nil && !errors.Is(derr, service.ErrStillWorking) {
			a.log.Warn("e2b: delete a sandbox whose port rule was not recorded", "sandbox", id, "err", derr)
		}
		return fmt.Errorf("sandbox %s: record its E2B port rule (deleted the sandbox): %w", id, err)
	}
	return nil
}

// e2bPortRule returns sandbox id's any-port rule: ok false when it has
// none (a sandbox made through SPACE's own API).
func (a *API) e2bPortRule(ctx context.Context, id string) (rule service.HTTPPorts, ok bool, err error) {
	rule, ok, err = a.svc.HTTPPortsRule(ctx, id)
	if err != nil {
		return service.HTTPPorts{}, false, fmt.Errorf("sandbox %s: read its E2B port rule: %w", id, err)
	}
	return rule, ok, nil
}

// e2bTrafficFor is the trafficAccessToken of sandbox id as recorded: nil
// unless its ports are private.
func (a *API) e2bTrafficFor(ctx context.Context, id string) (*string, error) {
	rule, ok, err := a.e2bPortRule(ctx, id)
	if err != nil || !ok {
		return nil, err
	}
	return a.e2bTrafficOf(id, rule.Public), nil
}

// ProxyError is the JSON body of E2B's proxy errors: 502 for a sandbox
// it cannot reach, 403 for a missing or wrong traffic token.
type ProxyError struct {
	Message   string `json:"message"`
	SandboxID string `json:"sandboxId"`
	Code      int    `json:"code"`
}
