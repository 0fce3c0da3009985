package subscription

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/fhirpath"
	"github.com/pinion-health/pinion/pkg/search"
)

// FHIRPath criteria past the parse bounds are refused when written, with
// a 400 naming the extension's value.
func TestCheckRefusesCostlyCriteria(t *testing.T) {
	nested := "name.exists()"
	for i := 0; i < fhirpath.MaxDepth; i++ {
		nested = "name.where(" + nested + ").exists()"
	}
	for name, c := range map[string]struct{ expr, want string }{
		"too long":   {strings.Repeat("active and ", 200) + "active", "longer than 2000 characters"},
		"too nested": {nested, "nests more than 32 deep"},
		"bad regex":  {"name.family.matches('[')", "matches()"},
	} {
		err := Check(map[string]any{
			"resourceType": "Subscription", "status": "active", "criteria": "Patient",
			"channel": map[string]any{"type": "rest-hook", "endpoint": "Bot/b1"},
			"extension": []any{
				map[string]any{"url": ExtInteraction, "valueCode": "create"},
				map[string]any{"url": ExtFHIRPath, "valueString": c.expr},
			},
		})
		var fe *fhir.Error
		if !errors.As(err, &fe) || fe.Status != 400 || !strings.Contains(fe.Message(), c.want) ||
			len(fe.Outcome.Issue[0].Expression) != 1 || fe.Outcome.Issue[0].Expression[0] != "Subscription.extension[1].valueString" {
			t.Errorf("%s: %v, want a 400 saying %q at Subscription.extension[1].valueString", name, err, c.want)
		}
	}
}

// Criteria that spend their budget route nowhere and say why; the
// subscription's other routes and other subscriptions are unaffected.
func TestRouteWithinBudget(t *testing.T) {
	costly := sub(t, `,"extension":[{"url":"`+ExtFHIRPath+`","valueString":"%current.name.family.lower().lower().lower().lower().lower().lower() = 'x'"}]`)
	big := search.ContentDoc("Patient", "p1", "proj", time.Now(), map[string]any{
		"resourceType": "Patient", "name": []any{map[string]any{"family": "Ali" + strings.Repeat("a", 1<<20)}},
	})
	r, err := costly.Route(context.Background(), Create, big, none)
	if r != NotRouted || !errors.Is(err, fhirpath.ErrBudget) {
		t.Fatalf("Route = %v, %v; want NotRouted and ErrBudget", r, err)
	}
	if r, err := costly.Route(context.Background(), Create, patient("Alice"), none); r != NotRouted || err != nil {
		t.Fatalf("on a small Patient: %v, %v", r, err)
	}
	plain := sub(t, "")
	if r, err := plain.Route(context.Background(), Create, big, none); r != ByRestHook || err != nil {
		t.Fatalf("without FHIRPath: %v, %v; want ByRestHook", r, err)
	}
	// A context already spent (the event's or project's share) ends the
	// evaluation at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cheap := sub(t, `,"extension":[{"url":"`+ExtFHIRPath+`","valueString":"%current.name.exists()"}]`)
	if _, err := cheap.Route(ctx, Create, patient("Alice"), none); !errors.Is(err, fhirpath.ErrBudget) {
		t.Fatalf("with a spent context: %v", err)
	}
}
