package subscriptions

import (
	"context"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/subscription"
)

// resendInput is $resend's body, Medplum's ResendSubscriptionsOptions.
type resendInput struct {
	Interaction  string `json:"interaction"`
	Subscription string `json:"subscription"`
	Verbose      bool   `json:"verbose"`
}

// Resend is POST <type>/<id>/$resend, Medplum's resendSubscriptions: a
// project admin has the resource sent again to the subscriptions it
// meets, as if it had just been written with the interaction given
// (update unless said), or only to the one subscription named. The
// resource and its history are not changed; each delivery is a new one,
// made and retried as a write's would be.
func (s *Deliverer) Resend(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	p := r.Principal
	if err := access.Admin(p); err != nil {
		return nil, err
	}
	in := resendInput{Interaction: subscription.Update}
	if len(strings.TrimSpace(string(r.Body))) > 0 {
		if err := r.DecodeJSON(&in); err != nil {
			return nil, err
		}
	}
	switch in.Interaction {
	case "":
		in.Interaction = subscription.Update
	case subscription.Create, subscription.Update, subscription.Delete:
	default:
		return nil, fhir.BadRequest("Invalid interaction: "+in.Interaction, "interaction")
	}
	pol, err := s.policies.For(ctx, p)
	if err != nil {
		return nil, err
	}
	typ, id := r.Param("type"), r.Param("id")
	res, err := pol.Gate(s.repo, typ, id).Reach(ctx, access.Read, id)
	if err != nil {
		return nil, err
	}
	subs, err := s.activeSubscriptions(ctx, res.Project)
	if err != nil {
		return nil, err
	}
	if in.Subscription != "" {
		var only []*subscription.Subscription
		for _, sub := range subs {
			if "Subscription/"+sub.ID == in.Subscription {
				only = append(only, sub)
			}
		}
		subs = only
	}
	ev := repo.Event{Op: in.Interaction, Type: res.Type, ID: res.ID, VersionID: res.VersionID, Project: res.Project, Trace: bus.TraceFrom(ctx)}
	if err := s.matchChange(ctx, change{ev: ev, committed: time.Now(), resend: uuid.NewString()}, subs); err != nil {
		return nil, err
	}
	if in.Verbose {
		s.log.Info("subscriptions resent", "resource", res.Type+"/"+res.ID, "interaction", in.Interaction, "subscriptions", len(subs))
	}
	return bus.OK(), nil
}
