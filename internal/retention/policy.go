// Package retention owns which snapshots of a sandbox are kept and when the
// next one is taken: tiered retention that decays with age (every 10 minutes
// for the last hour, hourly for a day, daily for a week by default) and the
// per-sandbox snapshot schedule. Everything here is a pure function of its
// arguments, the clock included, so the snapshot scheduler (and its tests)
// decide with the same code.
//
// # Policy syntax
//
// A policy is a comma-separated list of tiers EVERY:FOR, each keeping one
// snapshot per EVERY-long bucket for snapshots younger than FOR, plus an
// optional max=N that caps the number kept. Durations are Go durations
// ("90s", "10m", "1h30m") or whole days ("7d"). Example, the default:
//
//	10m:1h,1h:24h,24h:168h
//
// Tiers must be listed by increasing FOR and non-decreasing EVERY, with
// 0 < EVERY <= FOR.
package retention

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
)

// DefaultPolicyString is the default policy: every 10 minutes for an hour,
// hourly for a day, daily for a week, at most 64 snapshots.
const DefaultPolicyString = "10m:1h,1h:24h,24h:168h,max=64"

// Limits of a policy, so that a configuration typo cannot ask for something
// absurd.
const (
	MaxTiers     = 16
	MaxDuration  = 10 * 365 * 24 * time.Hour
	MaxCountCap  = 100_000
	maxPolicyLen = 1024
)

// Tier keeps, among the snapshots younger than For, the newest one in each
// Every-long bucket of wall-clock time (buckets are aligned to the Unix epoch,
// so they do not move as time passes).
type Tier struct {
	Every time.Duration
	For   time.Duration
}

// Policy is a set of tiers and a cap on the number of snapshots kept.
type Policy struct {
	Tiers []Tier
	// MaxCount caps the snapshots kept (0: no cap). Pinned snapshots and the
	// newest of each kind are kept even beyond it.
	MaxCount int
}

// DefaultPolicy returns the policy of DefaultPolicyString.
func DefaultPolicy() Policy {
	p, err := ParsePolicy(DefaultPolicyString)
	if err != nil {
		panic(err) // a constant that does not parse is a bug
	}
	return p
}

// ParsePolicy parses the policy syntax described in the package doc.
func ParsePolicy(s string) (Policy, error) {
	var p Policy
	if len(s) > maxPolicyLen {
		return p, fmt.Errorf("retention policy: %d bytes, the limit is %d: %w", len(s), maxPolicyLen, errdefs.ErrInvalidArgument)
	}
	if strings.TrimSpace(s) == "" {
		return p, fmt.Errorf("retention policy: empty; want tiers like %q: %w", DefaultPolicyString, errdefs.ErrInvalidArgument)
	}
	seenMax := false
	for i, elem := range strings.Split(s, ",") {
		elem = strings.TrimSpace(elem)
		if v, ok := strings.CutPrefix(elem, "max="); ok {
			n, err := strconv.Atoi(v)
			if seenMax || err != nil || n < 0 || n > MaxCountCap {
				return p, fmt.Errorf("retention policy: element %d %q: want max=N once, 0 <= N <= %d: %w", i+1, elem, MaxCountCap, errdefs.ErrInvalidArgument)
			}
			p.MaxCount, seenMax = n, true
			continue
		}
		every, forStr, ok := strings.Cut(elem, ":")
		if !ok {
			return p, fmt.Errorf("retention policy: element %d %q: want EVERY:FOR (like 10m:1h) or max=N: %w", i+1, elem, errdefs.ErrInvalidArgument)
		}
		e, err := parseDuration(every)
		if err != nil {
			return p, fmt.Errorf("retention policy: element %d %q: every: %w", i+1, elem, err)
		}
		f, err := parseDuration(forStr)
		if err != nil {
			return p, fmt.Errorf("retention policy: element %d %q: for: %w", i+1, elem, err)
		}
		p.Tiers = append(p.Tiers, Tier{Every: e, For: f})
	}
	if err := p.Validate(); err != nil {
		return Policy{}, err
	}
	return p, nil
}

// parseDuration accepts a Go duration or a whole number of days ("7d").
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n <= 0 || n > int64(MaxDuration/(24*time.Hour)) {
			return 0, fmt.Errorf("%q: want a whole number of days in [1, %d]: %w", s, MaxDuration/(24*time.Hour), errdefs.ErrInvalidArgument)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q: want a duration like 10m, 1h or 7d: %w", s, errdefs.ErrInvalidArgument)
	}
	return d, nil
}

// Validate checks the policy's shape: 1 to MaxTiers tiers, each with
// 0 < Every <= For <= MaxDuration, For increasing and Every not decreasing
// from one tier to the next, and 0 <= MaxCount <= MaxCountCap.
func (p Policy) Validate() error {
	if len(p.Tiers) == 0 || len(p.Tiers) > MaxTiers {
		return fmt.Errorf("retention policy: %d tiers, want 1 to %d: %w", len(p.Tiers), MaxTiers, errdefs.ErrInvalidArgument)
	}
	for i, t := range p.Tiers {
		if t.Every <= 0 || t.Every > t.For || t.For > MaxDuration {
			return fmt.Errorf("retention policy: tier %d (%s): want 0 < every <= for <= %s: %w", i+1, t, MaxDuration, errdefs.ErrInvalidArgument)
		}
		if i > 0 && (t.For <= p.Tiers[i-1].For || t.Every < p.Tiers[i-1].Every) {
			return fmt.Errorf("retention policy: tier %d (%s) after %s: list tiers by increasing for and non-decreasing every: %w", i+1, t, p.Tiers[i-1], errdefs.ErrInvalidArgument)
		}
	}
	if p.MaxCount < 0 || p.MaxCount > MaxCountCap {
		return fmt.Errorf("retention policy: max=%d, want 0 to %d: %w", p.MaxCount, MaxCountCap, errdefs.ErrInvalidArgument)
	}
	return nil
}

// String formats t as EVERY:FOR.
func (t Tier) String() string { return t.Every.String() + ":" + t.For.String() }

// String formats p in the syntax ParsePolicy reads.
func (p Policy) String() string {
	parts := make([]string, 0, len(p.Tiers)+1)
	for _, t := range p.Tiers {
		parts = append(parts, t.String())
	}
	if p.MaxCount > 0 {
		parts = append(parts, "max="+strconv.Itoa(p.MaxCount))
	}
	return strings.Join(parts, ",")
}
