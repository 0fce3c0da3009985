package subscriptions

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhirpath"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/subscription"
)

// FHIRPath criteria are evaluated within what is left of the change's
// and the project's shares: a spent share is no match, saying which; a
// subscription without FHIRPath criteria matches whatever is left.
func TestRouteWithinShares(t *testing.T) {
	parse := func(ext string) *subscription.Subscription {
		sub, err := subscription.Parse("s1", "p1", []byte(`{"status":"active","criteria":"Patient",`+
			`"channel":{"type":"rest-hook","endpoint":"https://h.example/x"}`+ext+`}`))
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	withPath := parse(`,"extension":[{"url":"` + subscription.ExtFHIRPath + `","valueString":"name.exists()"}]`)
	plain := parse("")
	doc := search.ContentDoc("Patient", "pat1", "p1", time.Now(), map[string]any{
		"resourceType": "Patient", "name": []any{map[string]any{"family": "Ali"}},
	})
	previous := func() map[string]any { return map[string]any{} }
	s := &Deliverer{}
	ev := repo.Event{Project: "p1", Type: "Patient", ID: "pat1", Op: subscription.Create}

	share, left := time.Second, eventFHIRPathTime
	if r, err := s.route(context.Background(), change{ev: ev, share: &share}, withPath, doc, previous, &left); err != nil || r != subscription.ByRestHook {
		t.Fatalf("within its shares: %v, %v", r, err)
	}
	if share >= time.Second || left >= eventFHIRPathTime {
		t.Fatalf("the time taken was not counted: share %s, left %s", share, left)
	}
	for name, c := range map[string]struct {
		share, left time.Duration
		want        error
	}{
		"project's share spent": {0, eventFHIRPathTime, errProjectShare},
		"change's share spent":  {time.Second, 0, errEventShare},
	} {
		share, left := c.share, c.left
		r, err := s.route(context.Background(), change{ev: ev, share: &share}, withPath, doc, previous, &left)
		if r != subscription.NotRouted || !errors.Is(err, fhirpath.ErrBudget) || !errors.Is(err, c.want) {
			t.Errorf("%s: %v, %v; want NotRouted, ErrBudget and %v", name, r, err, c.want)
		}
		if r, err := s.route(context.Background(), change{ev: ev, share: &share}, plain, doc, previous, &left); r != subscription.ByRestHook || err != nil {
			t.Errorf("%s, no FHIRPath criteria: %v, %v", name, r, err)
		}
	}
}
