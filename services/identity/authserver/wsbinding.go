package authserver

import (
	"context"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/subscription"
)

// wsBindingLifetime is how long a binding token binds (Medplum's hour).
const wsBindingLifetime = time.Hour

// WSBindingToken is GET /fhir/R4/Subscription/:id/$get-ws-binding-token
// (the R4B backport operation, as Medplum's getwsbindingtoken.ts serves
// it): a token that binds a WebSocket on /ws/subscriptions-r4 to one
// subscription the caller can read. Unlike Medplum's, the token opens
// nothing else: it is not an access token.
func (s *Service) WSBindingToken(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	p := r.Principal
	if p == nil {
		return nil, fhir.Unauthorized()
	}
	pol, err := s.policies.For(ctx, p)
	if err != nil {
		return nil, err
	}
	id := r.Param("id")
	sub, err := pol.Gate(s.repo, "Subscription", id).Read(ctx, id)
	if err != nil {
		if fe := fhir.AsError(err); fe.Status < 500 {
			return nil, fhir.BadRequest("Error reading subscription: " + fe.Message())
		}
		return nil, err
	}
	// Notifications carry what the subscription's author may read: only
	// the author binds to them (Medplum lets anyone who can read the
	// Subscription, who could then see resources their own policy hides).
	parsed, err := subscription.Parse(sub.ID, sub.Project, sub.JSON)
	if err != nil || parsed.Author != p.Profile {
		return nil, fhir.ForbiddenText("Only the subscription's author may bind to it")
	}
	_, uid, _ := fhir.SplitReference(p.User)
	claims := &auth.Claims{LoginID: p.LoginID, Username: uid, Profile: p.Profile, Scope: p.Scope, ClientID: p.ClientID, SubscriptionID: id}
	claims.Subject = uid
	claims.Audience = jwt.ClaimStrings{s.cfg.BaseURL}
	tok, err := s.signer.Sign(claims, wsBindingLifetime)
	if err != nil {
		return nil, err
	}
	ws := strings.Replace(strings.Replace(s.cfg.BaseURL, "http://", "ws://", 1), "https://", "wss://", 1)
	return bus.JSON(200, map[string]any{
		"resourceType": "Parameters",
		"parameter": []any{
			map[string]any{"name": "token", "valueString": tok},
			map[string]any{"name": "expiration", "valueDateTime": time.Now().Add(wsBindingLifetime).UTC().Format(time.RFC3339)},
			map[string]any{"name": "subscription", "valueString": id},
			map[string]any{"name": "websocket-url", "valueUrl": ws + "ws/subscriptions-r4"},
		},
	}), nil
}
