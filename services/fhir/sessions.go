package fhir

import (
	"context"
	"net/url"
	"strconv"

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

// afterWrite brings the session bucket in step with a stored resource and
// marks the answer with the revision it depends on.
func (s *Service) afterWrite(ctx context.Context, resp *bus.Response, res *repo.Resource) (*bus.Response, error) {
	var rev uint64
	var err error
	switch res.Type {
	case "ProjectMembership":
		rev, err = projects.SyncSession(ctx, s.repo, s.sessions, res)
	case "AccessPolicy":
		// Its address rules are part of each session that uses it.
		rev, err = s.syncPolicyUsers(ctx, res.Project, "AccessPolicy/"+res.ID)
	}
	if err != nil {
		return nil, err
	}
	if rev == 0 {
		return resp, nil
	}
	return resp.WithSession(session.MembershipsBucket, rev), nil
}

// syncPolicyUsers writes again the session entry of every membership of
// the project that names the policy, and returns the last revision.
func (s *Service) syncPolicyUsers(ctx context.Context, project, policy string) (uint64, error) {
	var rev uint64
	for offset := 0; ; offset += 100 {
		q, err := search.Parse("ProjectMembership", url.Values{"access-policy": {policy}, "_count": {"100"}, "_offset": {strconv.Itoa(offset)}})
		if err != nil {
			return 0, err
		}
		page, err := s.repo.Search(ctx, repo.Scope{Project: project}, "ProjectMembership", q)
		if err != nil {
			return 0, err
		}
		for _, m := range page.Resources {
			if rev, err = projects.SyncSession(ctx, s.repo, s.sessions, m); err != nil {
				return 0, err
			}
		}
		if !page.More {
			return rev, nil
		}
	}
}

// afterDelete ends the sessions a deleted resource held up: a membership's,
// and a client application's (whose memberships are deleted with it: they
// would name a profile that is gone).
func (s *Service) afterDelete(ctx context.Context, resp *bus.Response, project, typ, id string) (*bus.Response, error) {
	var rev uint64
	switch typ {
	case "ProjectMembership":
		r, err := s.sessions.DeleteMembership(ctx, id)
		if err != nil {
			return nil, err
		}
		rev = r
	case "AccessPolicy":
		r, err := s.syncPolicyUsers(ctx, project, typ+"/"+id)
		if err != nil {
			return nil, err
		}
		rev = r
	case "ClientApplication":
		q, err := search.Parse("ProjectMembership", url.Values{"profile": {typ + "/" + id}, "_count": {"100"}})
		if err != nil {
			return nil, err
		}
		page, err := s.repo.Search(ctx, repo.System, "ProjectMembership", q)
		if err != nil {
			return nil, err
		}
		for _, m := range page.Resources {
			// Tokens first, then the membership.
			if rev, err = s.sessions.DeleteMembership(ctx, m.ID); err != nil {
				return nil, err
			}
			if err := s.repo.Delete(ctx, repo.System, "ProjectMembership", m.ID); err != nil && !fhir.Missing(err) {
				return nil, err
			}
		}
	}
	if rev == 0 {
		return resp, nil
	}
	return resp.WithSession(session.MembershipsBucket, rev), nil
}
