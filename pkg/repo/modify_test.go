package repo

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Two Modify calls that both read the same version both land: the one
// that writes second is refused by the version check, reads the first
// one's version and applies its change to that.
func TestModifyConcurrentChangesBothLand(t *testing.T) {
	ctx := context.Background()
	r1, r2 := instance(t), instance(t)
	sc := Scope{Project: "p"}
	res, err := r1.Create(ctx, sc, patient("Modify"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Each change waits, on its first call, until both have read: they
	// then start from the same version, and one must retry.
	var read sync.WaitGroup
	read.Add(2)
	bothRead := make(chan struct{})
	go func() { read.Wait(); close(bothRead) }()
	calls := make([]int, 2)
	set := func(i int, field, value string) func(*Resource) (map[string]any, error) {
		return func(cur *Resource) (map[string]any, error) {
			calls[i]++
			if calls[i] == 1 {
				read.Done()
				select {
				case <-bothRead:
				case <-time.After(10 * time.Second):
					return nil, errors.New("the other change never read")
				}
			}
			m, err := cur.Decode()
			if err != nil {
				return nil, err
			}
			m[field] = value
			return m, nil
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, c := range []struct {
		r            *Repo
		field, value string
	}{{r1, "gender", "female"}, {r2, "birthDate", "1970-01-01"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = c.r.Modify(ctx, sc, "Patient", res.ID, WriteOptions{}, set(i, c.field, c.value))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	if calls[0]+calls[1] < 3 {
		t.Fatalf("changes called %v times: neither retried, so they did not race", calls)
	}
	h, err := r1.History(ctx, sc, "Patient", res.ID)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := h[0].Decode()
	if m["gender"] != "female" || m["birthDate"] != "1970-01-01" {
		t.Fatalf("final version %s lost a change", h[0].JSON)
	}
	if len(h) != 3 {
		t.Fatalf("history has %d versions, want 3", len(h))
	}
}

// A change that fails, or returns nil, writes nothing; a caller's
// If-Match of a replaced version is a 412 before the change runs; a
// change that loses every race is answered 412 after a bounded number of
// attempts.
func TestModifyWritesOnlyWhatTheChangeReturns(t *testing.T) {
	ctx := context.Background()
	r := instance(t)
	sc := Scope{Project: "p"}
	res, err := r.Create(ctx, sc, patient("Unchanged"), WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refusal := fhir.BadRequest("no")
	_, err = r.Modify(ctx, sc, "Patient", res.ID, WriteOptions{}, func(cur *Resource) (map[string]any, error) {
		m, _ := cur.Decode()
		m["gender"] = "male" // edited, then refused
		return m, refusal
	})
	if !errors.Is(err, refusal) {
		t.Fatalf("Modify returned %v, want the change's error", err)
	}
	out, err := r.Modify(ctx, sc, "Patient", res.ID, WriteOptions{}, func(*Resource) (map[string]any, error) { return nil, nil })
	if err != nil || out.VersionID != res.VersionID {
		t.Fatalf("a nil change: %v, version %v, want %s", err, out, res.VersionID)
	}
	called := false
	_, err = r.Modify(ctx, sc, "Patient", res.ID, WriteOptions{IfMatch: "stale"}, func(*Resource) (map[string]any, error) {
		called = true
		return nil, nil
	})
	if !errors.Is(err, fhir.ErrPreconditionFailed) || called {
		t.Fatalf("a stale If-Match: %v (change called: %v), want 412 before the change", err, called)
	}
	h, err := r.History(ctx, sc, "Patient", res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 1 || h[0].VersionID != res.VersionID {
		t.Fatalf("history has %d versions, head %s: something was written", len(h), h[0].VersionID)
	}

	// Every attempt, another write lands between the read and the write.
	attempts := 0
	_, err = r.Modify(ctx, sc, "Patient", res.ID, WriteOptions{}, func(cur *Resource) (map[string]any, error) {
		attempts++
		m, _ := cur.Decode()
		other, _ := cur.Decode()
		other["birthDate"] = time.Date(2000, 1, attempts, 0, 0, 0, 0, time.UTC).Format(time.DateOnly)
		if _, err := r.Update(ctx, sc, other, WriteOptions{}); err != nil {
			return nil, err
		}
		m["gender"] = "male"
		return m, nil
	})
	if !errors.Is(err, fhir.ErrPreconditionFailed) || attempts != maxModifyAttempts {
		t.Fatalf("always overtaken: %v after %d attempts, want 412 after %d", err, attempts, maxModifyAttempts)
	}
}
