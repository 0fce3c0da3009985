package repo

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/store"
)

// A search the store refuses for its shape is 400, one cut off by its
// request's deadline is 503: neither is an unexplained 500.
func TestSearchErrors(t *testing.T) {
	r := instance(t)
	ctx := context.Background()
	sc := Scope{Project: "search-errors"}
	for i := range 50 {
		if _, err := r.Create(ctx, sc, patient(fmt.Sprintf("Errant%d", i)), WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	q, err := search.Parse("Patient", nil)
	if err != nil {
		t.Fatal(err)
	}
	wide := make([]any, 1000) // more than SQLite's expression tree holds
	for i := range wide {
		wide[i] = fmt.Sprintf("x%d", i)
	}
	tooDeep := store.Cond{Op: store.OpContains, Field: "name", Values: wide}
	want := func(err error, status int, text string) {
		t.Helper()
		var fe *fhir.Error
		if !errors.As(err, &fe) || fe.Status != status || fe.Message() != text {
			t.Fatalf("error %v, want %d %q", err, status, text)
		}
	}
	_, err = r.Search(ctx, sc, "Patient", q, tooDeep)
	want(err, 400, "Search too complex: use fewer values or parameters")

	counted, err := search.Parse("Patient", map[string][]string{"_summary": {"count"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Search(ctx, sc, "Patient", counted, tooDeep)
	want(err, 400, "Search too complex: use fewer values or parameters")

	// Past its deadline (SQLite also interrupts a statement running then).
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	<-short.Done()
	_, err = r.Search(short, sc, "Patient", q)
	want(err, 503, "Search took too long")
}
