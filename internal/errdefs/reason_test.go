package errdefs

import (
	"errors"
	"fmt"
	"testing"
)

func TestReasonIsOfItsClass(t *testing.T) {
	err := fmt.Errorf("start exec e1: %w", fmt.Errorf("%w: template %q is not on this node", ErrTemplateMissing, "base"))
	if !errors.Is(err, ErrTemplateMissing) || !IsFailedPrecondition(err) {
		t.Fatalf("%v: want both the reason and its class", err)
	}
	if got := ReasonOf(err); got != "template_missing" {
		t.Fatalf("ReasonOf = %q", got)
	}
	if errors.Is(fmt.Errorf("%w: other", ErrFailedPrecondition), ErrTemplateMissing) {
		t.Fatal("the class alone matched a reason")
	}
	if want := "failed precondition: template \"base\" is not on this node"; errors.Unwrap(err).Error() != want {
		t.Fatalf("message %q, want %q", errors.Unwrap(err).Error(), want)
	}
}

func TestReasonsAreDistinctAndRecoverable(t *testing.T) {
	seen := map[Reason]bool{}
	for _, r := range Reasons() {
		name := ReasonOf(r)
		if name == "" || seen[name] {
			t.Fatalf("reason %q empty or twice", name)
		}
		seen[name] = true
		if ReasonError(name) != r {
			t.Fatalf("ReasonError(%q) does not give its sentinel back", name)
		}
		if ClassOf(r) == nil {
			t.Fatalf("reason %q has no class", name)
		}
	}
	if ReasonError("nope") != nil || ReasonError("") != nil {
		t.Fatal("an unknown reason gave a sentinel")
	}
}
