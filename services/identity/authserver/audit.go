package authserver

import (
	"context"
	"errors"
	"net/url"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/identity/clients"
)

// recordToken records the token endpoint's refusals (issue 54): who
// tried, through which client, and why. The tokens it issues are not
// recorded yet: stored one AuditEvent each, they cost the endpoint half
// its throughput (docs/audit.md), which a cheaper path for high-rate
// events must win back first.
func (s *Service) recordToken(ctx context.Context, r *bus.Request, err error) error {
	if s.audit == nil {
		return nil // wired without a trail (a test of the endpoint alone)
	}
	var no *Refusal
	if !errors.As(err, &no) {
		return nil // issued (see above), or the service failed: nothing a person did
	}
	form, _ := url.ParseQuery(string(r.Body))
	kind := audit.TokenIssued
	switch form.Get("grant_type") {
	case "client_credentials":
		kind = audit.SignIn // a client authenticating itself, as BALP's authentication event
	case "refresh_token":
		kind = audit.TokenRefreshed
	}
	e := audit.Event{Kind: kind.Name, Address: r.Remote, Outcome: audit.MinorFailure, Detail: no.code + ": " + no.text}
	id, _, _ := credentials(r.Get("Authorization"), form)
	if id == "" {
		id = form.Get("client_id")
	}
	if id != "" && len(id) <= 128 && clients.Builtin(id, s.cfg.BaseURL) == nil {
		e.Client = "ClientApplication/" + id
		e.Project = s.clientProject(ctx, id)
	}
	if err := s.audit.Record(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "the audit trail did not take a refusal of the token endpoint", "err", err)
		return fhir.Unavailable("The audit trail is unavailable; try again")
	}
	return nil
}

// clientProject is the project of a client the endpoint knows ("" for
// one it does not): its refusals go to that project's trail.
func (s *Service) clientProject(ctx context.Context, id string) string {
	c, ok := s.clients.Cached(id)
	if !ok || c.Membership == "" {
		return ""
	}
	m, err := s.sessions.GetMembership(ctx, c.Membership)
	if err != nil {
		return ""
	}
	return m.Project
}
