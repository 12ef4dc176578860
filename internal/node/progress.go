package node

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	nodev1 "github.com/spacesandbox/space/api/node/v1"
	"github.com/spacesandbox/space/internal/progress"
)

// progressEvery is how often a long operation's caller that asked for
// progress gets a reading (and always the last).
const progressEvery = time.Second

// Reporter receives the readings of a long operation; nil discards them.
type Reporter func(progress.Report)

// wantsProgress reports whether the caller asked for a streamed answer
// (nodev1.ProgressContentType).
func wantsProgress(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), nodev1.ProgressContentType)
}

// serveLong answers a long operation. A caller that asked for progress gets
// a streamed answer (nodev1.ProgressLine): the readings run reports, then the
// result or the error; any other caller the plain JSON answer and run gets
// a nil Reporter.
func serveLong(w http.ResponseWriter, r *http.Request, run func(Reporter) (any, error)) {
	if !wantsProgress(r) {
		v, err := run(nil)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
		return
	}
	st := &progressStream{w: w, enc: json.NewEncoder(w)}
	st.fl, _ = w.(http.Flusher)
	w.Header().Set("Content-Type", nodev1.ProgressContentType)
	w.WriteHeader(http.StatusOK)
	v, err := run(st.report)
	if err != nil {
		_, code := StatusOf(err)
		st.write(nodev1.ProgressLine{Error: &nodev1.Error{Code: code, Message: err.Error()}})
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		st.write(nodev1.ProgressLine{Error: &nodev1.Error{Code: "internal", Message: "encode the answer: " + err.Error()}})
		return
	}
	st.write(nodev1.ProgressLine{Result: b})
}

// progressStream writes the lines of a streamed answer.
type progressStream struct {
	w  http.ResponseWriter
	fl http.Flusher
	mu sync.Mutex // guards enc and the writes
	// enc encodes one line per value.
	enc *json.Encoder
}

func (s *progressStream) report(r progress.Report) {
	p := nodev1.Progress(r)
	s.write(nodev1.ProgressLine{Progress: &p})
}

// write sends one line; a caller that went away makes it fail, which the
// operation does not notice (its context ends it).
func (s *progressStream) write(l nodev1.ProgressLine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.enc.Encode(l) == nil && s.fl != nil {
		s.fl.Flush()
	}
}

// trackBytes makes the tracker of a byte-counted phase that sends its
// readings to report (nil: none).
func trackBytes(phase string, total int64, report Reporter) *progress.Tracker {
	if report == nil {
		report = func(progress.Report) {}
	}
	return progress.NewTracker(phase, progress.UnitBytes, total, progress.Throttle{Every: progressEvery}, nil, report)
}
