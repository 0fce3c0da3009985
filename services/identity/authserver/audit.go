package authserver

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/identity/clients"
)

// recordToken records what the token endpoint did (issue 54): the tokens
// a grant issued — to whom, through which client, in which project, with
// which scopes — or why it refused them. A client authenticating itself
// (client_credentials) is a sign-in, as BALP's authentication event is.
func (s *Service) recordToken(ctx context.Context, r *bus.Request, resp *bus.Response, err error) error {
	if s.audit == nil {
		return nil // wired without a trail (a test of the endpoint alone)
	}
	form, _ := url.ParseQuery(string(r.Body))
	grant := form.Get("grant_type")
	kind := audit.TokenIssued
	switch grant {
	case "client_credentials":
		kind = audit.SignIn
	case "refresh_token":
		kind = audit.TokenRefreshed
	}
	e := audit.Event{Kind: kind.Name, Address: r.Remote}
	var no *Refusal
	switch {
	case errors.As(err, &no):
		e.Outcome, e.Detail = audit.MinorFailure, no.code+": "+no.text
		id, _, _ := credentials(r.Get("Authorization"), form)
		if id == "" {
			id = form.Get("client_id")
		}
		if id != "" && len(id) <= 128 && clients.Builtin(id, s.cfg.BaseURL) == nil {
			e.Client = "ClientApplication/" + id
			e.Project = s.clientProject(ctx, id)
		}
	case err != nil:
		return nil // the service failed: no token, and nothing a person did
	default:
		s.describeIssued(&e, resp)
		e.Entities[0].Detail = "grant_type=" + grant + "; " + e.Entities[0].Detail
	}
	if err := s.audit.Record(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "token not issued: the audit trail did not take its event", "err", err)
		return fhir.Unavailable("The audit trail is unavailable; try again")
	}
	return nil
}

// describeIssued reads who got the tokens of a token answer, and for what.
func (s *Service) describeIssued(e *audit.Event, resp *bus.Response) {
	var body struct {
		AccessToken string         `json:"access_token"`
		Scope       string         `json:"scope"`
		Project     fhir.Reference `json:"project"`
		Profile     fhir.Reference `json:"profile"`
	}
	_ = json.Unmarshal(resp.Body, &body)
	e.Outcome = audit.Success
	e.Who = body.Profile.Reference
	_, project, _ := strings.Cut(body.Project.Reference, "Project/")
	e.Project = project
	// The access token is this service's own, just signed: read, not verified.
	var c auth.Claims
	if _, _, err := jwt.NewParser().ParseUnverified(body.AccessToken, &c); err == nil && c.ClientID != "" && clients.Builtin(c.ClientID, s.cfg.BaseURL) == nil {
		e.Client = "ClientApplication/" + c.ClientID
	}
	e.Entities = []audit.Entity{{What: body.Project.Reference, Detail: "scope=" + body.Scope}}
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
