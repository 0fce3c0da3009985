package fhirsvc

import (
	"context"
	"net/url"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
)

// Writes through /fhir that change what a token may do reach the session
// bucket before they are answered, as the admin routes' do: a membership
// set inactive through PUT stops its tokens on their next request, as does
// a deleted membership or client application.

// sessionTypes are the types whose writes afterWrite and afterDelete carry
// into the session bucket as they happen.
var sessionTypes = map[string]bool{"ProjectMembership": true, "AccessPolicy": true, "ClientApplication": true}

// afterWrite waits for the session projection of a stored resource and
// marks the answer with the revision it depends on.
func (s *Service) afterWrite(ctx context.Context, r *bus.Request, resp *bus.Response, res *repo.Resource) (*bus.Response, error) {
	action := "U"
	if resp.Status == 201 {
		action = "C"
	}
	if err := s.recordChange(ctx, r, action, res.Type, res.ID, res.Project); err != nil {
		return nil, err
	}
	return s.projected(ctx, resp, res.Type, res.ID, res.Project)
}

// projected has the projector bring the entries a ProjectMembership or an
// AccessPolicy (whose address rules are part of each entry that uses it)
// feeds in step, and marks the answer with the revision to wait for.
func (s *Service) projected(ctx context.Context, resp *bus.Response, typ, id, project string) (*bus.Response, error) {
	if typ != "ProjectMembership" && typ != "AccessPolicy" {
		return resp, nil
	}
	rev, err := projects.Project(ctx, s.nc, typ, id, project)
	if err != nil {
		return nil, err
	}
	if rev == 0 {
		return resp, nil
	}
	return resp.WithSession(session.MembershipsBucket, rev), nil
}

// afterDelete ends the sessions a deleted resource held up: a membership's,
// and a client application's (whose memberships are deleted with it: they
// would name a profile that is gone).
func (s *Service) afterDelete(ctx context.Context, r *bus.Request, resp *bus.Response, project, typ, id string) (*bus.Response, error) {
	if err := s.recordChange(ctx, r, "D", typ, id, project); err != nil {
		return nil, err
	}
	if typ != "ClientApplication" {
		return s.projected(ctx, resp, typ, id, project)
	}
	q, err := search.Parse("ProjectMembership", url.Values{"profile": {typ + "/" + id}, "_count": {"100"}})
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.AllProjects, "ProjectMembership", q)
	if err != nil {
		return nil, err
	}
	for _, m := range page.Resources {
		if err := s.repo.Delete(ctx, repo.AllProjects, "ProjectMembership", m.ID); err != nil && !fhir.Missing(err) {
			return nil, err
		}
		if resp, err = s.projected(ctx, resp, m.Type, m.ID, m.Project); err != nil {
			return nil, err
		}
	}
	return resp, nil
}
