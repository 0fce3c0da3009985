package authserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// recordRefusal records a refusal of the token endpoint (issue 54): who
// tried, through which client, and why. The tokens it issues are recorded
// where they are made (recordIssued).
func (s *Service) recordRefusal(ctx context.Context, r *bus.Request, err error) error {
	if s.audit == nil {
		return nil // wired without a trail (a test of the endpoint alone)
	}
	var no *Refusal
	if !errors.As(err, &no) {
		return nil // issued, or the service failed: nothing a person did
	}
	form, _ := url.ParseQuery(string(r.Body))
	e := audit.Event{Kind: issuedKind(form.Get("grant_type")).Name, Address: r.Remote, Outcome: audit.MinorFailure, Detail: no.code + ": " + no.text}
	id, _, _ := credentials(r.Get("Authorization"), form)
	if id == "" {
		id = form.Get("client_id")
	}
	if id != "" && len(id) <= 128 {
		e.Client = audit.ClientRef(id)
		e.Project = s.clientProject(ctx, id)
	}
	return s.record(ctx, e)
}

// recordIssued records tokens issued by a grant: to whom (a person, or a
// client for itself), through which client, in which project, with which
// scopes. It is called before the answer is sent: a token the trail
// cannot record is not issued.
func (s *Service) recordIssued(ctx context.Context, r *bus.Request, grant, who, client, project, scope string) error {
	if s.audit == nil {
		return nil
	}
	e := audit.Event{Kind: issuedKind(grant).Name, Project: project, Who: who, Client: audit.ClientRef(client), Address: r.Remote,
		Entities: []audit.Entity{{What: "Project/" + project, Detail: "grant_type=" + grant + "; scope=" + scope}}}
	return s.record(ctx, e)
}

// issuedKind is the kind of event a grant makes: a client authenticating
// itself is a sign-in, as BALP's authentication event is.
func issuedKind(grant string) audit.Kind {
	switch grant {
	case "client_credentials":
		return audit.SignIn
	case "refresh_token":
		return audit.TokenRefreshed
	}
	return audit.TokenIssued
}

func (s *Service) record(ctx context.Context, e audit.Event) error {
	if err := s.audit.Record(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "the token endpoint's answer withheld: the audit trail did not take its event", "err", err)
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

// RefusedBearer is bus.SubjTokenRefused: the gateway refused a bearer
// token, and the trail records it (at most once a minute per token; the
// gateway bounds it). A token whose signature held names its person and
// project; a forged or expired one only what it claimed, in the server's
// own trail.
func (s *Service) RefusedBearer(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	var rt bus.RefusedToken
	if err := json.Unmarshal(r.Body, &rt); err != nil {
		return nil, fhir.BadRequest("Invalid refused token")
	}
	e := audit.Event{Kind: audit.TokenRefused.Name, Outcome: audit.MinorFailure, Detail: rt.Reason, Address: r.Remote, Name: rt.Claimed}
	if rt.Login != "" {
		if l, err := s.sessions.GetLogin(ctx, rt.Login); err == nil {
			e.Who, e.Client = l.User, audit.ClientRef(l.Client)
			if m, err := s.sessions.GetMembership(ctx, l.Membership); err == nil {
				e.Project = m.Project
			}
		}
		e.Entities = []audit.Entity{{What: e.Who, Detail: "token " + rt.TokenID}}
	}
	if err := s.record(ctx, e); err != nil {
		return nil, err
	}
	return bus.OK(), nil
}
