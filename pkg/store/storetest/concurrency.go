package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/store"
)

// parallel runs f(0..n-1) at once, released together, and returns the
// errors by index.
func parallel(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			errs[i] = f(i)
		}()
	}
	start.Done()
	done.Wait()
	return errs
}

// testConcurrentReplace: of writers racing from one version, exactly one
// wins.
func testConcurrentReplace(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	v1 := record("Patient", "c", "1", "p1", t0, `{"v":1}`)
	mustWrite(t, s, create(v1, map[string]any{"s_n": "v1"}))
	const n = 20
	errs := parallel(n, func(i int) error {
		r := record("Patient", "c", fmt.Sprintf("2-%d", i), "p1", t0.Add(time.Minute), fmt.Sprintf(`{"writer":%d}`, i))
		return s.Write(ctx, &store.Write{Record: r, Prev: "1", Fields: map[string]any{"s_n": fmt.Sprint(i)}, Event: []byte("e")})
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("writers %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("writer %d: %v, want ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no writer won")
	}
	got := mustGet(t, s, "Patient", "c")
	if want := fmt.Sprintf("2-%d", winner); got.Version != want || string(got.JSON) != fmt.Sprintf(`{"writer":%d}`, winner) {
		t.Fatalf("current version %s %s, want the winner's %s", got.Version, got.JSON, want)
	}
	h, err := s.History(ctx, "Patient", "c", 0)
	if err != nil || len(h) != 2 {
		t.Fatalf("History: %v, %v", versions(h), err)
	}
	if got := sortedIDs(t, s, "Patient", store.Query{Filter: []store.Cond{store.Eq("s_n", fmt.Sprint(winner))}, Limit: 10}); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("winner's search value: %v", got)
	}
	if n, err := s.Count(ctx, "Patient", &store.Query{Filter: []store.Cond{store.Exists("s_n", true)}}); err != nil || n != 1 {
		t.Fatalf("losers left search values: count %d, %v", n, err)
	}
	if p := pending(t, s); len(p) != 1 || p[0].ID != store.OutboxID("Patient", "c", got.Version) {
		t.Fatalf("events: %+v", p)
	}
}

// testConcurrentCreate: concurrent creates of distinct ids all succeed,
// while racing creates of one id, mixed in, leave one winner — a failure
// must not spoil the calls committed beside it.
func testConcurrentCreate(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	const n, dups = 50, 10
	errs := parallel(n+dups, func(i int) error {
		id := fmt.Sprintf("id%02d", i)
		if i >= n {
			id = "dup"
		}
		r := record("Patient", id, "1", "p1", t0, fmt.Sprintf(`{"i":%d}`, i))
		return s.Write(ctx, &store.Write{Record: r, Fields: map[string]any{"s_i": float64(i), "s_group": "g"}, Event: []byte(id)})
	})
	dupWins := 0
	for i, err := range errs {
		switch {
		case i < n && err != nil:
			t.Fatalf("create %d: %v", i, err)
		case i >= n && err == nil:
			dupWins++
		case i >= n && !errors.Is(err, store.ErrExists):
			t.Fatalf("racing create %d: %v, want ErrExists", i, err)
		}
	}
	if dupWins != 1 {
		t.Fatalf("%d racing creates of one id won, want 1", dupWins)
	}
	for i := range n {
		r := mustGet(t, s, "Patient", fmt.Sprintf("id%02d", i))
		if string(r.JSON) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("id%02d: %s", i, r.JSON)
		}
	}
	if c, err := s.Count(ctx, "Patient", &store.Query{Filter: []store.Cond{store.Eq("s_group", "g")}}); err != nil || c != n+1 {
		t.Fatalf("Count: %d, %v; want %d", c, err, n+1)
	}
	if c, err := s.Count(ctx, "Patient", &store.Query{Filter: []store.Cond{store.Compare("s_i", store.OpGe, float64(n))}}); err != nil || c != 1 {
		t.Fatalf("the racing creates left %d sets of search values (%v), want 1", c, err)
	}
	if p := pending(t, s); len(p) != n+1 {
		t.Fatalf("%d events, want %d", len(p), n+1)
	}
}

func testConcurrentClaim(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	const n = 20
	winners := make([]string, n)
	errs := parallel(n, func(i int) error {
		var err error
		winners[i], err = s.Claim(ctx, "key", fmt.Sprintf("owner%d", i))
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Claim %d: %v", i, err)
		}
	}
	w := winners[0]
	if !slices.Contains(candidates(n), w) {
		t.Fatalf("winner %q is no claimant", w)
	}
	for i, o := range winners {
		if o != w {
			t.Fatalf("claimant %d was told %q, claimant 0 %q", i, o, w)
		}
	}
	if o, err := s.ClaimOwner(ctx, "key"); err != nil || o != w {
		t.Fatalf("ClaimOwner: %q, %v; want %q", o, err, w)
	}
}

func candidates(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("owner%d", i)
	}
	return out
}

func testConcurrentSwapSecret(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	if err := s.SetSecret(ctx, "k", []byte("v0")); err != nil {
		t.Fatalf("SetSecret: %v", err)
	}
	const n = 20
	errs := parallel(n, func(i int) error {
		return s.SwapSecret(ctx, "k", []byte("v0"), fmt.Appendf(nil, "v%d", i+1))
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("swaps %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("swap %d: %v, want ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no swap won")
	}
	secretIs(t, s, "k", fmt.Appendf(nil, "v%d", winner+1))

	// Racing creates of one secret: one wins, the rest find it exists.
	errs = parallel(n, func(i int) error {
		return s.SwapSecret(ctx, "new", nil, fmt.Appendf(nil, "n%d", i))
	})
	winner = -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("creates %d and %d both won", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, store.ErrExists):
			t.Fatalf("create %d: %v, want ErrExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no create won")
	}
	secretIs(t, s, "new", fmt.Appendf(nil, "n%d", winner))
}

// testConcurrentSetSecret: writers setting one new secret at once (every
// identity instance stores the configured super-admin secret at start)
// all succeed, and one of their values is kept.
func testConcurrentSetSecret(t *testing.T, s store.Store) {
	ctx := ctxOf(t)
	const n = 20
	for round := range 5 {
		key := fmt.Sprintf("set%d", round)
		errs := parallel(n, func(i int) error {
			return s.SetSecret(ctx, key, fmt.Appendf(nil, "v%d", i))
		})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, set %d: %v", round, i, err)
			}
		}
		got, err := s.Secret(ctx, key)
		var i int
		if _, scanErr := fmt.Sscanf(string(got), "v%d", &i); err != nil || scanErr != nil || i < 0 || i >= n {
			t.Fatalf("round %d: %q, %v; want one of the values set", round, got, err)
		}
	}
}
