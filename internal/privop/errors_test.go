package privop

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/spacesandbox/space/internal/errdefs"
)

// TestErrorRoundTrip: every class, alone and with each of its reasons,
// answered by the node-manager and read by the client over the wire's JSON,
// keeps its class and reason; an unknown kind is of no class.
func TestErrorRoundTrip(t *testing.T) {
	var sentinels []error
	for _, c := range errdefs.Classes() {
		sentinels = append(sentinels, c)
		for _, r := range errdefs.Reasons() {
			if errdefs.ClassOf(r) == c {
				sentinels = append(sentinels, r)
			}
		}
	}
	for _, sentinel := range sentinels {
		err := fmt.Errorf("start e1: %w", fmt.Errorf("%w: details", sentinel))
		b, merr := json.Marshal(ErrorResponse(err))
		if merr != nil {
			t.Fatal(merr)
		}
		var resp Response
		if uerr := json.Unmarshal(b, &resp); uerr != nil {
			t.Fatal(uerr)
		}
		back := fmt.Errorf("node: %w", remoteError(OpStart, &resp))
		if got, want := errdefs.ClassOf(back), errdefs.ClassOf(sentinel); got != want {
			t.Errorf("%v: class %v after the round trip, want %v", err, got, want)
		}
		if got, want := errdefs.ReasonOf(back), errdefs.ReasonOf(sentinel); got != want {
			t.Errorf("%v: reason %q after the round trip, want %q", err, got, want)
		}
		if !errors.Is(back, sentinel) {
			t.Errorf("%v: the rebuilt error does not match its sentinel", err)
		}
	}
	for _, kind := range []string{"internal", "", "nonsense"} {
		back := remoteError(OpStart, &Response{Error: "boom", ErrorKind: kind, ErrorReason: "nonsense"})
		if c := errdefs.ClassOf(back); c != nil {
			t.Errorf("kind %q: class %v, want none", kind, c)
		}
	}
	if got := KindOf(errors.New("no class")); got != "internal" {
		t.Errorf("KindOf(no class) = %q", got)
	}
}
