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
// tree implements yet, with what to do instead.
var notBuilt = map[string]string{
	"s3": "the s3:// object store driver is not built yet (it arrives with the scale-out work); use file:///absolute/path",
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

// Open opens the store that rawURL names, choosing the driver by scheme:
//
//	file:///var/lib/space/objects   objstore/filestore (import it for its side effect)
//	s3://bucket/prefix              not built yet: ErrFailedPrecondition
//
// s3:// is a known scheme without a driver in this tree: Open answers it
// with ErrFailedPrecondition and says so, rather than pretending. An unknown
// scheme or a malformed URL is ErrInvalidArgument.
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
	if u.Scheme == "file" {
		return nil, fmt.Errorf("object store URL %q: the file:// driver is not linked into this binary (import internal/objstore/filestore): %w",
			rawURL, errdefs.ErrFailedPrecondition)
	}
	return nil, fmt.Errorf("object store URL %q: unknown scheme %q (want file:// or s3://): %w", rawURL, u.Scheme, errdefs.ErrInvalidArgument)
}
