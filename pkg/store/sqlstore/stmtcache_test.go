package sqlstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// Searches of more shapes than the cache keeps still answer, prepared or not.
func TestShapesPastTheCache(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	var ws []*store.Write
	for i := range 5 {
		ws = append(ws, &store.Write{
			Record: store.Record{Type: "Patient", ID: fmt.Sprint("p", i), Version: "1", Time: time.Now(), Project: "a", JSON: []byte(`{}`)},
			Fields: map[string]any{"name": fmt.Sprint("n", i)},
		})
	}
	if err := s.Write(ctx, ws...); err != nil {
		t.Fatal(err)
	}
	// Each query names a different number of values: a new shape each time.
	for n := 1; n < maxShapes+20; n++ {
		vals := make([]any, n)
		for i := range vals {
			vals[i] = fmt.Sprint("n", i)
		}
		q := &store.Query{Project: "a", Filter: []store.Cond{store.Eq("name", vals...)}, Limit: 10}
		got, err := s.Search(ctx, "Patient", q)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(n, 5); len(got) != want {
			t.Fatalf("%d values: %d found, want %d", n, len(got), want)
		}
	}
	if len(s.queries.m) != maxShapes {
		t.Fatalf("cache holds %d statements, want its bound %d", len(s.queries.m), maxShapes)
	}
}

func TestStmtCacheSharesOneStatement(t *testing.T) {
	s := openTemp(t)
	c := newStmtCache(s.rdb.PrepareContext, 1)
	defer c.close()
	ctx := context.Background()
	a := c.get(ctx, "SELECT 1")
	if a == nil || c.get(ctx, "SELECT 1") != a {
		t.Fatal("the same text was prepared twice")
	}
	if c.get(ctx, "SELECT 2") != nil {
		t.Fatal("a full cache prepared another statement")
	}
	if c.get(ctx, "SELECT nonsense FROM") != nil {
		t.Fatal("bad SQL was cached")
	}
}
