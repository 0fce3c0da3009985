package signin

import (
	"context"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/identity/clients"
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
	// A built-in client (Medplum's CLI, the console) is no ClientApplication.
	if clientID != "" && len(clientID) <= 128 && clients.Builtin(clientID, s.cfg.BaseURL) == nil {
		e.Client = "ClientApplication/" + clientID
	}
	if err := s.audit.Record(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "sign-in refused: the audit trail did not take its event", "err", err)
		return fhir.Unavailable("The audit trail is unavailable; try again")
	}
	return nil
}
