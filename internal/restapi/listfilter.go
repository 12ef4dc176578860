package restapi

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	sandboxv1 "github.com/spacesandbox/space/api/sandbox/v1"
	"github.com/spacesandbox/space/internal/errdefs"
)

// maxSandboxPage bounds the limit of a paged sandbox listing.
const maxSandboxPage = 1000

// sandboxQuery is what GET /v1/sandboxes was asked for: the filters every
// listed sandbox matches and, when paged, the page.
type sandboxQuery struct {
	state, template, name string
	metadata              map[string]string
	// limit is 0 for an unpaged listing.
	limit int
	// after is where the page starts: past the sandbox created at
	// afterTime with id afterID (the order of a paged listing).
	paged     bool
	afterTime time.Time
	afterID   string
}

// parseSandboxQuery reads the listing's optional filters (state, template,
// name, metadata=key=value repeated) and page (limit, page_token).
func parseSandboxQuery(q url.Values) (sandboxQuery, error) {
	sq := sandboxQuery{state: q.Get("state"), template: q.Get("template"), name: q.Get("name")}
	if sq.state != "" && !knownState(sq.state) {
		return sq, fmt.Errorf("%w: state %q: want one of %s", errdefs.ErrInvalidArgument, clip(sq.state), strings.Join(apiStates, ", "))
	}
	for _, kv := range q["metadata"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return sq, fmt.Errorf("%w: metadata %q: want key=value (repeat metadata= for more keys)", errdefs.ErrInvalidArgument, clip(kv))
		}
		if sq.metadata == nil {
			sq.metadata = map[string]string{}
		}
		sq.metadata[k] = v
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > maxSandboxPage {
			return sq, fmt.Errorf("%w: limit %q: want 1..%d", errdefs.ErrInvalidArgument, clip(l), maxSandboxPage)
		}
		sq.limit, sq.paged = n, true
	}
	if tok := q.Get("page_token"); tok != "" {
		t, id, err := decodeSandboxToken(tok)
		if err != nil {
			return sq, fmt.Errorf("%w: page_token: %v: pass next_page_token of the previous page unchanged", errdefs.ErrInvalidArgument, err)
		}
		sq.paged, sq.afterTime, sq.afterID = true, t, id
		if sq.limit == 0 {
			sq.limit = maxSandboxPage
		}
	}
	return sq, nil
}

// apiStates are the states a listed sandbox may be in (a deleted one is
// not listed).
var apiStates = []string{string(sandboxv1.StateCreating), string(sandboxv1.StateRunning), string(sandboxv1.StatePausing),
	string(sandboxv1.StatePaused), string(sandboxv1.StateResuming), string(sandboxv1.StateHibernating),
	string(sandboxv1.StateHibernated), string(sandboxv1.StateRestoring), string(sandboxv1.StateRecovering),
	string(sandboxv1.StateStopping), string(sandboxv1.StateStopped), string(sandboxv1.StateDeleting), string(sandboxv1.StateFailed)}

func knownState(s string) bool { return slices.Contains(apiStates, s) }

// match reports whether sb passes every filter of q.
func (q sandboxQuery) match(sb sandboxv1.Sandbox) bool {
	if q.state != "" && string(sb.State) != q.state || q.template != "" && sb.Template != q.template || q.name != "" && sb.Name != q.name {
		return false
	}
	for k, v := range q.metadata {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// page keeps the sandboxes of sbs that match q and, when q is paged,
// orders them by creation time then id and returns the page with the token
// of the next one ("" after the last page). An unpaged listing keeps the
// store's order, as before paging existed.
func (q sandboxQuery) page(sbs []sandboxv1.Sandbox) ([]sandboxv1.Sandbox, string) {
	out := make([]sandboxv1.Sandbox, 0, len(sbs))
	for _, sb := range sbs {
		if q.match(sb) {
			out = append(out, sb)
		}
	}
	if !q.paged {
		return out, ""
	}
	sort.Slice(out, func(i, j int) bool { return before(out[i].CreatedAt, out[i].ID, out[j].CreatedAt, out[j].ID) })
	if q.afterID != "" {
		i := sort.Search(len(out), func(i int) bool { return before(q.afterTime, q.afterID, out[i].CreatedAt, out[i].ID) })
		out = out[i:]
	}
	if len(out) <= q.limit {
		return out, ""
	}
	last := out[q.limit-1]
	return out[:q.limit], encodeSandboxToken(last.CreatedAt, last.ID)
}

// before orders sandboxes by creation time, then id.
func before(t1 time.Time, id1 string, t2 time.Time, id2 string) bool {
	if !t1.Equal(t2) {
		return t1.Before(t2)
	}
	return id1 < id2
}

// A sandbox page token is "s1.<unix nanoseconds>.<id>" in unpadded
// base64url: where the previous page ended, so a page is right however
// many sandboxes were created or deleted between the calls.
func encodeSandboxToken(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("s1." + strconv.FormatInt(t.UnixNano(), 10) + "." + id))
}

func decodeSandboxToken(tok string) (time.Time, string, error) {
	if len(tok) > 256 {
		return time.Time{}, "", fmt.Errorf("%d bytes is no token this API issued", len(tok))
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return time.Time{}, "", fmt.Errorf("%q is no token this API issued", clip(tok))
	}
	parts := strings.SplitN(string(raw), ".", 3)
	if len(parts) != 3 || parts[0] != "s1" || parts[2] == "" {
		return time.Time{}, "", fmt.Errorf("%q is no token this API issued", clip(tok))
	}
	ns, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || ns < 0 {
		return time.Time{}, "", fmt.Errorf("%q is no token this API issued", clip(tok))
	}
	return time.Unix(0, ns).UTC(), parts[2], nil
}
