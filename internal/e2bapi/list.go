package e2bapi

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spacesandbox/space/internal/errdefs"
	"github.com/spacesandbox/space/internal/sandbox"
	"github.com/spacesandbox/space/internal/service"
)

// E2B's listings: GET /v2/sandboxes (running and paused, filtered by state,
// metadata and template, paginated with limit and X-Next-Token) and the
// deprecated GET /sandboxes (running only, metadata filter).

// e2bMaxLimit is E2B's largest and default page size.
const e2bMaxLimit = 100

// e2bPage is a page request: its size, where it starts (after the item a
// token names; none: the first page), and the order by start time (E2B's
// default is newest first: desc).
type e2bPage struct {
	limit  int
	after  *pageItem
	desc   bool
	cursor pageCursor // seals the next page's token (cursor.go)
}

// pageItem is one listed item: an id and when it started.
type pageItem struct {
	id string
	at time.Time
	sb *sandbox.Sandbox
}

// parseE2BPage reads limit, nextToken and order from a query; the token
// must be one cur sealed.
func parseE2BPage(q url.Values, cur pageCursor) (e2bPage, error) {
	p := e2bPage{limit: e2bMaxLimit, desc: true, cursor: cur}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > e2bMaxLimit {
			return p, fmt.Errorf("%w: limit %q: want 1 to %d", errdefs.ErrInvalidArgument, service.Clip(v), e2bMaxLimit)
		}
		p.limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		after, ok := cur.open(v)
		if !ok {
			return p, fmt.Errorf("%w: nextToken %q is not one this server gave this caller for this listing; start again without it", errdefs.ErrInvalidArgument, service.Clip(v))
		}
		p.after = after
	}
	switch q.Get("order") {
	case "", "desc":
	case "asc":
		p.desc = false
	default:
		return p, fmt.Errorf("%w: order %q: want asc or desc", errdefs.ErrInvalidArgument, service.Clip(q.Get("order")))
	}
	return p, nil
}

// comparePage orders items by start time, then id.
func comparePage(a, b pageItem) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// apply sorts items, and returns the page and the token of the next one
// ("" when this is the last).
func (p e2bPage) apply(items []pageItem) ([]pageItem, string) {
	cmp := comparePage
	if p.desc {
		cmp = func(a, b pageItem) int { return comparePage(b, a) }
	}
	slices.SortFunc(items, cmp)
	if p.after != nil {
		i, _ := slices.BinarySearchFunc(items, *p.after, cmp)
		for i < len(items) && cmp(items[i], *p.after) <= 0 {
			i++
		}
		items = items[i:]
	}
	if len(items) > p.limit {
		return items[:p.limit], p.cursor.seal(items[p.limit-1])
	}
	return items, ""
}

// parseE2BMetadata reads E2B's metadata filter: the query value is itself
// a query string ("k=v&k2=v2") whose keys and values the SDK escaped once
// more (encodeURIComponent before URLSearchParams).
func parseE2BMetadata(raw string) (map[string]string, error) {
	if raw == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: metadata filter %q: %v", errdefs.ErrInvalidArgument, service.Clip(raw), err)
	}
	out := map[string]string{}
	for k, vs := range vals {
		key, err := url.QueryUnescape(k)
		if err != nil {
			key = k
		}
		v := vs[len(vs)-1]
		if u, err := url.QueryUnescape(v); err == nil {
			v = u
		}
		out[key] = v
	}
	return out, nil
}

// e2bListFilter is what a listing keeps.
type e2bListFilter struct {
	states   map[string]bool // e2bState values; empty: both
	metadata map[string]string
	template string
	after    time.Time
}

func (f e2bListFilter) keeps(sb *sandbox.Sandbox) bool {
	st := e2bState(sb.State)
	if st == "" || len(f.states) > 0 && !f.states[st] {
		return false
	}
	if f.template != "" && sb.Template != f.template {
		return false
	}
	if !f.after.IsZero() && !sb.CreatedAt.After(f.after) {
		return false
	}
	for k, v := range f.metadata {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// parseE2BListFilter reads state, metadata, template and startedAfter.
func parseE2BListFilter(q url.Values) (e2bListFilter, error) {
	var f e2bListFilter
	var err error
	if f.metadata, err = parseE2BMetadata(q.Get("metadata")); err != nil {
		return f, err
	}
	for _, v := range q["state"] {
		for _, st := range strings.Split(v, ",") {
			if st != "running" && st != "paused" {
				return f, fmt.Errorf("%w: state %q: want running or paused", errdefs.ErrInvalidArgument, service.Clip(st))
			}
			if f.states == nil {
				f.states = map[string]bool{}
			}
			f.states[st] = true
		}
	}
	f.template = q.Get("template")
	if v := q.Get("startedAfter"); v != "" {
		if f.after, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return f, fmt.Errorf("%w: startedAfter %q: want an RFC 3339 time", errdefs.ErrInvalidArgument, service.Clip(v))
		}
	}
	return f, nil
}

// e2bSandboxes lists the caller's sandboxes that f keeps.
func (a *API) e2bSandboxes(r *http.Request, f e2bListFilter) ([]pageItem, error) {
	sbs, err := a.svc.List(r.Context(), a.host.Caller(r.Context()))
	if err != nil {
		return nil, err
	}
	var items []pageItem
	for _, sb := range sbs {
		if f.keeps(sb) {
			items = append(items, pageItem{id: sb.ID, at: sb.CreatedAt, sb: sb})
		}
	}
	return items, nil
}

// handleE2BList is GET /v2/sandboxes.
func (a *API) handleE2BList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := parseE2BListFilter(q)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	page, err := parseE2BPage(q, a.pageCursorFor(r, pageSandboxes))
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	items, err := a.e2bSandboxes(r, f)
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	running := 0
	for _, it := range items {
		if e2bState(it.sb.State) == "running" {
			running++
		}
	}
	kept, next := page.apply(items)
	out := make([]ListedSandbox, 0, len(kept))
	for _, it := range kept {
		out = append(out, e2bListedOf(it.sb))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	w.Header().Set("X-Total-Running", strconv.Itoa(running))
	writeJSON(w, http.StatusOK, out)
}

// handleE2BListV1 is the deprecated GET /sandboxes: running sandboxes,
// unpaginated.
func (a *API) handleE2BListV1(w http.ResponseWriter, r *http.Request) {
	md, err := parseE2BMetadata(r.URL.Query().Get("metadata"))
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	items, err := a.e2bSandboxes(r, e2bListFilter{states: map[string]bool{"running": true}, metadata: md})
	if err != nil {
		a.writeE2BErr(w, r, err)
		return
	}
	kept, _ := e2bPage{limit: len(items) + 1}.apply(items)
	out := make([]ListedSandbox, 0, len(kept))
	for _, it := range kept {
		out = append(out, e2bListedOf(it.sb))
	}
	writeJSON(w, http.StatusOK, out)
}
