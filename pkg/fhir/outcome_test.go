package fhir

import (
	"errors"
	"fmt"
	"testing"
)

func TestKinds(t *testing.T) {
	wrapped := fmt.Errorf("read Patient/1: %w", NotFound())
	cases := []struct {
		err  error
		kind Kind
		want bool
	}{
		{NotFound(), ErrNotFound, true},
		{wrapped, ErrNotFound, true},
		{wrapped, ErrGone, false},
		{Gone(), ErrGone, true},
		{PreconditionFailed(), ErrPreconditionFailed, true},
		{Conflict("x"), ErrConflict, true},
		{Conflict("x"), ErrPreconditionFailed, false},
		{BadRequest("x"), ErrBadRequest, true},
		{errors.New("404"), ErrNotFound, false},
		{nil, ErrNotFound, false},
	}
	for i, c := range cases {
		if got := errors.Is(c.err, c.kind); got != c.want {
			t.Errorf("%d: errors.Is(%v, %v) = %v, want %v", i, c.err, c.kind, got, c.want)
		}
	}
	if !Missing(Gone()) || !Missing(wrapped) || Missing(Forbidden()) || Missing(errors.New("down")) {
		t.Error("Missing: want true for 404 and 410 only")
	}
}
