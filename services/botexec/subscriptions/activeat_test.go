package subscriptions

import (
	"context"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/testenv"
)

// A change is matched against the subscriptions active when it was
// written, however late the matcher reads them: not one made, or switched
// on, after it; but one active then and only edited since.
func TestActiveAt(t *testing.T) {
	env := testenv.New(t)
	ctx := context.Background()
	s := New(Config{JS: env.JS, Repo: env.Repo})
	sc := repo.Scope{Project: "p1"}
	write := func(id, status string) *repo.Resource {
		t.Helper()
		afterClock(t, time.Now()) // each write in its own millisecond
		res := map[string]any{"resourceType": "Subscription", "status": status, "reason": "test", "criteria": "Patient",
			"channel": map[string]any{"type": "rest-hook", "endpoint": "https://h.example/" + status}}
		var out *repo.Resource
		var err error
		if id == "" {
			out, err = env.Repo.Create(ctx, sc, res, repo.WriteOptions{})
		} else {
			res["id"] = id
			out, err = env.Repo.Update(ctx, sc, res, repo.WriteOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	check := func(name string, res *repo.Resource, at time.Time, want bool) {
		t.Helper()
		sub, err := subscriptionOf(res)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.activeAt(ctx, sub, at); err != nil || got != want {
			t.Errorf("%s: activeAt = %v, %v; want %v", name, got, err, want)
		}
	}

	early := write("", "active")
	edited := write(early.ID, "active")
	off := write("", "off")
	change := afterClock(t, off.LastUpdated) // a change written here
	afterClock(t, change)
	made := write("", "active")
	switchedOn := write(off.ID, "active")

	check("made before", early, change, true)
	check("edited since, active before", edited, change, true)
	check("made since", made, change, false)
	check("switched on since", switchedOn, change, false)
	check("made in the change's millisecond", made, made.LastUpdated, true)
}

// afterClock waits until the clock reads a millisecond after t, the
// repository's resolution, and returns that millisecond.
func afterClock(t *testing.T, after time.Time) time.Time {
	t.Helper()
	var now time.Time
	testenv.Eventually(t, "the next millisecond", func() bool {
		now = time.Now().UTC().Truncate(time.Millisecond)
		return now.After(after.Truncate(time.Millisecond))
	})
	return now
}
