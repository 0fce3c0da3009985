package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// block is a trail block of n events at first, their times t0 + minute.
func block(project string, first int64, n int, minute int, keys ...string) *store.TrailBlock {
	b := &store.TrailBlock{Project: project, First: first, Keys: keys,
		From: t0.Add(time.Duration(minute) * time.Minute), To: t0.Add(time.Duration(minute)*time.Minute + time.Second)}
	for i := range n {
		b.Events = append(b.Events, fmt.Appendf(nil, `{"resourceType":"AuditEvent","id":"%s.%d","text":"\u00e9 \"q\""}`, project, first+int64(i)))
	}
	return b
}

// The trail's blocks: appended only at the end, found by place, by key and
// time, their events kept byte for byte, purged by prefix.
func testTrail(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	if _, err := s.LastTrailBlock(ctx, "p1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("empty trail's last block: %v", err)
	}
	b1 := block("p1", 1, 3, 0, "patient|Patient/a", "agent|User/x")
	for _, b := range []*store.TrailBlock{b1, block("p1", 4, 2, 5, "patient|Patient/b", "agent|User/x"), block("p2", 1, 1, 6, "patient|Patient/a")} {
		if err := s.AppendTrail(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []*store.TrailBlock{block("p1", 1, 1, 9), block("p1", 4, 1, 9)} {
		if err := s.AppendTrail(ctx, b); !errors.Is(err, store.ErrExists) {
			t.Fatalf("place %d taken again: %v, want ErrExists", b.First, err)
		}
	}
	if err := s.AppendTrail(ctx, block("p1", 7, 1, 9)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("a block after a gap: %v, want ErrConflict", err)
	}
	got, err := s.TrailBlock(ctx, "p1", 3)
	if err != nil || got.First != 1 || len(got.Events) != 3 || string(got.Events[2]) != string(b1.Events[2]) ||
		!got.From.Equal(b1.From) || !got.To.Equal(b1.To) {
		t.Fatalf("block of place 3: %+v %v", got, err)
	}
	if got, err := s.TrailBlock(ctx, "p1", 9); err != nil || got.First != 4 || got.Last() != 5 {
		t.Fatalf("block of place 9 (past the end): %+v %v", got, err)
	}
	if last, err := s.LastTrailBlock(ctx, "p1"); err != nil || last.First != 4 {
		t.Fatalf("last block: %+v %v", last, err)
	}
	firsts := func(q store.TrailQuery) []string {
		t.Helper()
		bs, err := s.TrailBlocks(ctx, &q)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, b := range bs {
			out = append(out, fmt.Sprintf("%s:%d", b.Project, b.First))
		}
		return out
	}
	for _, c := range []struct {
		q    store.TrailQuery
		want []string
	}{
		{store.TrailQuery{Project: "p1"}, []string{"p1:4", "p1:1"}},
		{store.TrailQuery{Project: "p1", Limit: 1}, []string{"p1:4"}},
		{store.TrailQuery{Project: "p1", Before: 4}, []string{"p1:1"}},
		{store.TrailQuery{Project: "p1", Keys: []string{"agent|User/x", "patient|Patient/a"}}, []string{"p1:1"}},
		{store.TrailQuery{Project: "p1", Keys: []string{"patient|Patient/c"}}, nil},
		{store.TrailQuery{Project: "p2", Keys: []string{"patient|Patient/a"}}, []string{"p2:1"}},
		{store.TrailQuery{Keys: []string{"patient|Patient/a"}}, nil}, // the server's own trail
		{store.TrailQuery{Project: "p1", From: t0.Add(2 * time.Minute)}, []string{"p1:4"}},
		{store.TrailQuery{Project: "p1", To: t0.Add(2 * time.Minute)}, []string{"p1:1"}},
		{store.TrailQuery{Project: "p1", Ascending: true}, []string{"p1:1", "p1:4"}},
		{store.TrailQuery{Project: "p1", After: 3}, []string{"p1:4"}},
		{store.TrailQuery{Project: "p1", After: 2}, []string{"p1:4", "p1:1"}},
	} {
		if got := firsts(c.q); !slices.Equal(got, c.want) {
			t.Errorf("%+v: %v, want %v", c.q, got, c.want)
		}
	}
	// Through 4: the first block goes, the second is cut to place 5.
	if n, err := s.PurgeTrail(ctx, "p1", 4); err != nil || n != 2 {
		t.Fatalf("purge through 4: %d %v, want a block removed and one cut", n, err)
	}
	if got := firsts(store.TrailQuery{Project: "p1"}); !slices.Equal(got, []string{"p1:5"}) {
		t.Fatalf("after the purge: %v", got)
	}
	if got, err := s.TrailBlock(ctx, "p1", 5); err != nil || len(got.Events) != 1 || !strings.Contains(string(got.Events[0]), `"p1.5"`) {
		t.Fatalf("the cut block: %+v %v", got, err)
	}
	if got := firsts(store.TrailQuery{Project: "p1", Keys: []string{"patient|Patient/a"}}); got != nil {
		t.Fatalf("the purged block's keys still find it: %v", got)
	}
	if ps, err := s.TrailProjects(ctx); err != nil || !slices.Equal(ps, []string{"p1", "p2"}) {
		t.Fatalf("projects with a trail: %v %v", ps, err)
	}
	if n, err := s.PurgeTrail(ctx, "p1", 5); err != nil || n != 1 {
		t.Fatalf("purge of the rest: %d %v", n, err)
	}
	// Emptied, the trail takes its next block at the place after.
	if err := s.AppendTrail(ctx, block("p1", 6, 1, 9)); err != nil {
		t.Fatalf("the next block of an emptied trail: %v", err)
	}
}

// Writers racing for the same places: exactly one block takes each.
func testConcurrentTrail(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	const writers, rounds = 4, 10
	var mu sync.Mutex
	won := map[int64]int{}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				first := int64(1)
				if last, err := s.LastTrailBlock(ctx, "race"); err == nil {
					first = last.Last() + 1
				} else if !errors.Is(err, store.ErrNotFound) {
					t.Error(err)
					return
				}
				err := s.AppendTrail(ctx, block("race", first, 1+w, 0))
				switch {
				case err == nil:
					mu.Lock()
					won[first]++
					mu.Unlock()
				case !errors.Is(err, store.ErrExists) && !errors.Is(err, store.ErrConflict):
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	next := int64(1)
	for {
		b, err := s.TrailBlock(ctx, "race", next)
		if errors.Is(err, store.ErrNotFound) || err == nil && b.Last() < next {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if b.First != next || won[next] != 1 {
			t.Fatalf("place %d: block at %d, %d writers won it", next, b.First, won[next])
		}
		next = b.Last() + 1
	}
	if next == 1 {
		t.Fatal("no block stored")
	}
}
