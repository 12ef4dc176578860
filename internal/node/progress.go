package node

import (
	"sync"
	"time"

	nodeapiv1 "github.com/spacesandbox/space/api/node/v1/nodeapi"
	"github.com/spacesandbox/space/internal/progress"
)

// progressEvery is how often a long operation's caller that asked for
// progress gets a reading (and always the last).
const progressEvery = time.Second

// Reporter receives the readings of a long operation; nil discards them.
type Reporter func(progress.Report)

// progressStream sends the readings of a long operation, then its result,
// on the operation's Connect stream.
type progressStream struct {
	mu sync.Mutex // guards the stream: readings may come from several goroutines
	// send sends one reading.
	send func(*nodeapiv1.Progress) error
}

// trackBytes makes the tracker of a byte-counted phase that sends its
// readings to report (nil: none).
func trackBytes(phase string, total int64, report Reporter) *progress.Tracker {
	if report == nil {
		report = func(progress.Report) {}
	}
	return progress.NewTracker(phase, progress.UnitBytes, total, progress.Throttle{Every: progressEvery}, nil, report)
}
