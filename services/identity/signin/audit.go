package signin

import (
	"context"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// recordPassword records a password sign-in (issue 54): the person (or,
// refused, the address typed), the client, the project it was for, and
// the outcome. Recorded before the answer: a sign-in the trail cannot
// record does not happen.
func (s *Service) recordPassword(ctx context.Context, r *bus.Request, email, userID, clientID, project string) error {
	e := audit.Event{Kind: audit.SignIn.Name, Project: project, Address: r.Remote, Outcome: audit.Success,
		Entities: []audit.Entity{{What: "User/" + userID, Detail: "method=password"}}}
	if userID == "" {
		e.Outcome, e.Detail, e.Name = audit.MinorFailure, "Email or password is invalid", email
		e.Entities = nil
	} else {
		e.Who = "User/" + userID
	}
	e.Client = audit.ClientRef(clientID)
	return s.record(ctx, e)
}

// recordPasskey records a sign-in by passkey on the sign-in page: the
// person it verified, or why it was refused.
func (s *Service) recordPasskey(ctx context.Context, r *bus.Request, a AuthRequest, userID, problem string) error {
	e := audit.Event{Kind: audit.SignIn.Name, Project: a.project, Address: r.Remote, Client: audit.ClientRef(a.ClientID)}
	if userID == "" {
		e.Outcome, e.Detail = audit.MinorFailure, problem
	} else {
		e.Who = "User/" + userID
		e.Entities = []audit.Entity{{What: e.Who, Detail: "method=passkey"}}
	}
	return s.record(ctx, e)
}

// record records e before the answer: what the trail cannot take does
// not happen.
func (s *Service) record(ctx context.Context, e audit.Event) error {
	if err := s.audit.Record(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "refused: the audit trail did not take its event", "kind", e.Kind, "err", err)
		return fhir.Unavailable("The audit trail is unavailable; try again")
	}
	return nil
}
