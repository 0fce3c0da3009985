package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// A search whose shape SQLite refuses (search.Parse bounds them; this is
// the safety net) is store.ErrTooComplex, which answers 400, never an
// unexplained error that answers 500.
func TestSearchTooComplex(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	w := &store.Write{
		Record: store.Record{Type: "Patient", ID: "a", Version: "1", Time: time.Now().UTC(), Project: "p", JSON: []byte(`{"id":"a"}`)},
		Fields: map[string]any{"s_name": []string{"ann"}},
	}
	if err := s.Write(ctx, w); err != nil {
		t.Fatalf("Write: %v", err)
	}
	contains := func(n int) store.Cond {
		vs := make([]any, n)
		for i := range vs {
			vs[i] = fmt.Sprintf("x%d", i)
		}
		return store.Cond{Op: store.OpContains, Field: "s_name", Values: vs}
	}
	deep := func(n int) store.Cond {
		cs := make([]store.Cond, n)
		for i := range cs {
			cs[i] = store.Cond{Op: store.OpPrefix, Field: "s_name", Values: []any{fmt.Sprintf("y%d", i)}}
		}
		return store.Or(cs...)
	}
	// What search.Parse lets through runs.
	q := &store.Query{Project: "p", Filter: []store.Cond{contains(100)}, Limit: 10}
	if _, err := s.Search(ctx, "Patient", q); err != nil {
		t.Fatalf("100 alternatives: %v", err)
	}
	for name, c := range map[string]store.Cond{"contains": contains(1000), "or": deep(1200)} {
		q := &store.Query{Project: "p", Filter: []store.Cond{c}, Limit: 10}
		if _, err := s.Search(ctx, "Patient", q); !errors.Is(err, store.ErrTooComplex) {
			t.Errorf("%s: Search: %v, want ErrTooComplex", name, err)
		}
		if _, err := s.Count(ctx, "Patient", q); !errors.Is(err, store.ErrTooComplex) {
			t.Errorf("%s: Count: %v, want ErrTooComplex", name, err)
		}
	}
}
