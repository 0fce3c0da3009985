package signin

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/web"
)

// ConsentsPage is GET and POST /consents: the applications the person
// signed in in this browser allowed to act for them, each with a button
// that withdraws the consent, which ends the application's sign-ins made
// under it, their access tokens included (consent.Store.End).
func (s *Service) ConsentsPage(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b, bs, refused, err := s.ownPage(ctx, r, "The applications you allowed are listed here once you are signed in in this browser.")
	if bs == nil {
		return refused, err
	}
	page := &web.Consents{}
	status := 200
	var rev uint64
	if r.Method == "POST" {
		form, refused, err := s.pages.Form(ctx, r, b)
		if form == nil {
			return refused, err
		}
		client := form.Get("client")
		rev, err = s.consents.End(ctx, bs.User, client)
		switch {
		case errors.Is(err, fhir.ErrNotFound):
			status, page.Problem = 404, "That application has no consent of yours to withdraw."
		case err != nil:
			return nil, err
		default:
			if err := s.record(ctx, audit.Event{Kind: audit.ConsentEnded.Name, Project: s.clientProject(ctx, client), Who: bs.User,
				Client: audit.ClientRef(client), Address: r.Remote,
				Entities: []audit.Entity{{What: audit.ClientRef(client)}}}); err != nil {
				return nil, err
			}
			page.Notice = "Consent withdrawn: " + s.clientName(ctx, client) + " no longer acts for you."
		}
	}
	given, err := s.consents.Of(ctx, bs.User)
	if err != nil {
		return nil, err
	}
	for _, c := range given {
		page.Clients = append(page.Clients, web.ConsentView{ID: c.Client, Name: s.clientName(ctx, c.Client), Scope: c.Scope,
			Given: time.Unix(c.At, 0).UTC().Format("2 Jan 2006 15:04 UTC")})
	}
	csrf, err := s.pages.CSRFToken(ctx, b)
	if err != nil {
		return nil, err
	}
	resp, err := s.pages.Render(status, "consents", b, web.Data{Title: "Applications you allowed", CSRF: csrf, Consents: page,
		Link: s.cfg.BaseURL + "console"})
	if resp != nil && rev != 0 {
		resp = resp.WithSession(session.EndedBucket, rev)
	}
	return resp, err
}

// clientName is a client's name, or its id when it has none (or is gone).
func (s *Service) clientName(ctx context.Context, id string) string {
	res, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", id)
	if err != nil {
		return id
	}
	c, err := res.Decode()
	if err != nil {
		return id
	}
	name, _ := c["name"].(string)
	return cmp.Or(name, id)
}

// clientProject is the project a client is registered in ("" when gone).
func (s *Service) clientProject(ctx context.Context, id string) string {
	res, err := s.repo.Read(ctx, repo.AllProjects, "ClientApplication", id)
	if err != nil {
		return ""
	}
	return res.Project
}
