package store

import (
	"context"
	"time"
)

// MaxReplicaAddresses bounds the addresses one replica publishes.
const MaxReplicaAddresses = 256

// ReplicaAddresses is the optional ability of a Store shared by several
// control-plane replicas to tell each the others' own addresses, so that the
// internal-service list every replica sends its nodes names all of them.
type ReplicaAddresses interface {
	// PutReplicaAddresses records replica's addresses (IP address strings,
	// at most MaxReplicaAddresses) until expires, replacing what it put
	// before. Rows expired before now are removed on the way.
	PutReplicaAddresses(ctx context.Context, replica string, addrs []string, expires, now time.Time) error
	// ListReplicaAddresses returns the addresses of every replica whose
	// record has not expired at now, in no particular order.
	ListReplicaAddresses(ctx context.Context, now time.Time) ([]string, error)
}
