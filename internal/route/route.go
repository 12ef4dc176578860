// Package route is the control plane's cache of where a sandbox's requests
// go: the node and execution currently serving it and the capability that
// authorises requests there (ARCHITECTURE.md §3, seeds 000/001).
//
// Routes are repaired, never renewed. When a receiver answers RefreshRoute
// (the capability names another incarnation of the sandbox) the caller
// resolves the route again and calls Repair with the route that was
// rejected: the cache entry is replaced only if it is still that route
// (compare-and-swap), so a late rejection of an old route never evicts a
// newer entry, and the repaired route keeps the rejected one's expiry, so a
// repair never extends an authorization. A caller retries at most once.
package route

import (
	"sync"
	"time"

	"github.com/spacesandbox/space/internal/capability"
)

// Route is where one sandbox's requests for one operation go.
type Route struct {
	// Identity is the execution the route reaches (sandbox, generation,
	// node, runtime, activation).
	Identity capability.Identity
	// ExecID is the execution's id on its node.
	ExecID string
	// Op is the operation the capability allows.
	Op capability.Op
	// Token is the encoded capability requests carry.
	Token string
	// Expires is when the capability expires; the route is not used after.
	Expires time.Time
	// Repaired is set on a route made by Repair (it must not be repaired
	// again by the same request).
	Repaired bool
}

type key struct {
	sandbox string
	op      capability.Op
}

// Cache holds one route per sandbox and operation. It is safe for
// concurrent use.
type Cache struct {
	// Margin is how long before its expiry a route stops being handed out
	// (so a request does not start with a capability about to expire).
	Margin time.Duration

	mu sync.Mutex
	m  map[key]*Route
}

// Get returns the route for sandbox and op, or nil when there is none or
// it expires within the margin at now.
func (c *Cache) Get(sandbox string, op capability.Op, now time.Time) *Route {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.m[key{sandbox, op}]
	if r == nil || !now.Add(c.Margin).Before(r.Expires) {
		return nil
	}
	return r
}

// Put installs r as the route of its sandbox and operation, replacing any.
func (c *Cache) Put(r *Route) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[key]*Route{}
	}
	c.m[key{r.Identity.Sandbox, r.Op}] = r
}

// Repair replaces the entry rejected (the route a request used and a
// receiver answered RefreshRoute to) with fresh, keeping rejected's expiry,
// and returns the route to retry with. If the entry is no longer rejected —
// another request repaired it, or a newer route was installed — it is kept
// and returned (nil when it was removed or has expired). fresh may be nil
// when the caller could not resolve a new route: the rejected entry is then
// removed if it is still current.
func (c *Cache) Repair(rejected, fresh *Route, now time.Time) *Route {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := key{rejected.Identity.Sandbox, rejected.Op}
	cur := c.m[k]
	if cur != rejected {
		if cur == nil || !now.Before(cur.Expires) {
			return nil
		}
		return cur
	}
	if fresh == nil {
		delete(c.m, k)
		return nil
	}
	repaired := *fresh
	if rejected.Expires.Before(repaired.Expires) {
		repaired.Expires = rejected.Expires
	}
	repaired.Repaired = true
	c.m[k] = &repaired
	return &repaired
}

// Forget removes every route of sandbox (it was deleted).
func (c *Cache) Forget(sandbox string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.m {
		if k.sandbox == sandbox {
			delete(c.m, k)
		}
	}
}

// Len reports how many routes are cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
