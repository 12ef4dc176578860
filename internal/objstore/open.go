package objstore

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	"github.com/spacesandbox/space/internal/errdefs"
)

// OpenFunc opens a store from a parsed URL of the scheme it was registered for.
type OpenFunc func(ctx context.Context, u *url.URL) (Store, error)

// drivers maps a URL scheme to the driver that opens it. Drivers register
// themselves from init (objstore/filestore registers "file"), so this
// package does not import its drivers and a binary links only those it
// imports — the pattern of database/sql and gocloud.dev/blob.
var (
	driversMu sync.RWMutex // guards drivers
	drivers   = map[string]OpenFunc{}
)

// notBuilt names the schemes SPACE will support but that no driver in this
// tree implements yet, with what to do instead. None at the moment; the
// mechanism stays for the next one.
var notBuilt = map[string]string{}

// linkable names the package of each driver in this tree, for the error a
// binary that does not link it gives.
var linkable = map[string]string{
	"file": "internal/objstore/filestore",
	"s3":   "internal/objstore/s3store",
}

// Register makes open the driver for URLs of scheme. It panics when the
// scheme is already registered: two drivers for one scheme is a build error.
func Register(scheme string, open OpenFunc) {
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[scheme]; dup {
		panic("objstore: driver registered twice for scheme " + scheme)
	}
	drivers[scheme] = open
}

// Open opens the store that rawURL names, choosing the driver by scheme
// (import the driver's package for its side effect):
//
//	file:///var/lib/space/objects                       objstore/filestore
//	s3://bucket/prefix?endpoint=host:port&insecure=1    objstore/s3store (credentials from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)
//
// A known scheme whose driver the binary does not link is
// ErrFailedPrecondition, saying which package to import; an unknown scheme
// or a malformed URL is ErrInvalidArgument.
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("object store URL %q: %v: %w", rawURL, err, errdefs.ErrInvalidArgument)
	}
	driversMu.RLock()
	open, ok := drivers[u.Scheme]
	driversMu.RUnlock()
	if ok {
		return open(ctx, u)
	}
	if why, known := notBuilt[u.Scheme]; known {
		return nil, fmt.Errorf("object store URL %q: %s: %w", rawURL, why, errdefs.ErrFailedPrecondition)
	}
	if pkg, known := linkable[u.Scheme]; known {
		return nil, fmt.Errorf("object store URL %q: the %s:// driver is not linked into this binary (import %s): %w",
			u.Redacted(), u.Scheme, pkg, errdefs.ErrFailedPrecondition)
	}
	return nil, fmt.Errorf("object store URL %q: unknown scheme %q (want file:// or s3://): %w", rawURL, u.Scheme, errdefs.ErrInvalidArgument)
}
