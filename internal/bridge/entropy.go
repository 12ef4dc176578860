package bridge

import (
	"crypto/rand"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// entropyBytes is how much host randomness the guest mixes into its RNG on every
// init; 64 bytes is well past what a full reseed of the kernel pool needs.
const entropyBytes = 64

func freshEntropy() ([]byte, error) {
	b := make([]byte, entropyBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("host entropy: %w", err)
	}
	return b, nil
}

func nowProto() *timestamppb.Timestamp { return timestamppb.New(time.Now()) }
