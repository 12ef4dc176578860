package e2bapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"time"

	"github.com/spacesandbox/space/internal/sandbox"
)

// E2B page tokens (nextToken, X-Next-Token) are opaque to clients and bound
// to the caller: base64url (unpadded) of a version byte, the position (the
// last listed item's start time in Unix nanoseconds, 8 bytes big-endian,
// and its id) and the first 16 bytes of HMAC-SHA256, under the server's MAC
// key (e2bTokenKey), of a label, the listing (sandboxes or snapshots), the
// tenant and all of the above. A token another tenant was given, a token of
// the other listing, or one edited in any byte does not verify, and is
// refused with 400 as E2B answers a token it did not give. The position is
// a start time and an id, not an offset, so a page still starts at the
// right place when items were deleted in between.

const (
	// pageTokenVersion is the first byte of a page token.
	pageTokenVersion = 1
	// pageTokenLabel separates page tokens from every other MAC under the
	// same key.
	pageTokenLabel = "space e2b page token v1\x00"
	// pageTokenMAC is how many bytes of the MAC a token carries: 128 bits.
	pageTokenMAC = 16
	// maxPageTokenID bounds the id a token carries (ids are far shorter).
	maxPageTokenID = 64
)

// Listings a page token can belong to.
const (
	pageSandboxes = "sandboxes"
	pageSnapshots = "snapshots"
)

// pageCursor seals and opens the page tokens of one tenant's listing.
type pageCursor struct {
	key    []byte
	tenant string
	kind   string // pageSandboxes or pageSnapshots
}

// pageCursorFor is the cursor of r's caller for listing kind.
func (a *API) pageCursorFor(r *http.Request, kind string) pageCursor {
	return pageCursor{key: a.key, tenant: a.host.Caller(r.Context()).Tenant, kind: kind}
}

func (c pageCursor) mac(body []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(pageTokenLabel))
	m.Write([]byte(c.kind))
	m.Write([]byte{0})
	m.Write([]byte(c.tenant))
	m.Write([]byte{0})
	m.Write(body)
	return m.Sum(nil)[:pageTokenMAC]
}

// seal is the token of the page after it.
func (c pageCursor) seal(it pageItem) string {
	body := make([]byte, 9, 9+len(it.id)+pageTokenMAC)
	body[0] = pageTokenVersion
	binary.BigEndian.PutUint64(body[1:9], uint64(it.at.UnixNano()))
	body = append(body, it.id...)
	return base64.RawURLEncoding.EncodeToString(append(body, c.mac(body)...))
}

// open returns the position of a token seal made for this tenant and
// listing; ok is false for anything else.
func (c pageCursor) open(tok string) (it *pageItem, ok bool) {
	if len(tok) > base64.RawURLEncoding.EncodedLen(9+maxPageTokenID+pageTokenMAC) {
		return nil, false
	}
	// The decoder skips newlines: a token must be exactly the encoding of
	// its bytes, so that one position has one token.
	b, err := base64.RawURLEncoding.Strict().DecodeString(tok)
	if err != nil || base64.RawURLEncoding.EncodeToString(b) != tok || len(b) < 9+1+pageTokenMAC || b[0] != pageTokenVersion {
		return nil, false
	}
	body, sum := b[:len(b)-pageTokenMAC], b[len(b)-pageTokenMAC:]
	if !hmac.Equal(sum, c.mac(body)) {
		return nil, false
	}
	ns, id := binary.BigEndian.Uint64(body[1:9]), string(body[9:])
	if ns > math.MaxInt64 || !c.validID(id) {
		return nil, false
	}
	return &pageItem{id: id, at: time.Unix(0, int64(ns))}, true
}

func (c pageCursor) validID(id string) bool {
	if c.kind == pageSnapshots {
		return sandbox.ValidSnapshotID(id)
	}
	return sandbox.ValidID(id)
}
