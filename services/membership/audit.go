package membership

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// auditedRoutes are the administration routes whose success the audit
// trail records, with the kind of event each makes.
var auditedRoutes = map[string]audit.Kind{
	"POST /admin/Project":                                     audit.ProjectCreated,
	"POST /fhir/R4/Project/$init":                             audit.ProjectCreated,
	"POST /admin/projects/:projectId/secrets":                 audit.ConfigChanged,
	"POST /admin/projects/:projectId/sites":                   audit.ConfigChanged,
	"POST /admin/projects/:projectId/invite":                  audit.MemberInvited,
	"POST /admin/projects/:projectId/members/:membershipId":   audit.MemberChanged,
	"PATCH /admin/projects/:projectId/members/:membershipId":  audit.MemberChanged,
	"DELETE /admin/projects/:projectId/members/:membershipId": audit.MemberRemoved,
	"POST /scim/v2/Users":                                     audit.MemberInvited,
	"PUT /scim/v2/Users/:id":                                  audit.MemberChanged,
	"PATCH /scim/v2/Users/:id":                                audit.MemberChanged,
	"DELETE /scim/v2/Users/:id":                               audit.MemberRemoved,
	"PATCH /scim/v2/Groups/:id":                               audit.MemberChanged,
}

// audited has each route of auditedRoutes record what it did once it
// succeeds, before it is answered. The routes stay declared as they are
// (bus.Handle, which the route table is generated from).
func (s *Service) audited(eps []bus.Endpoint) []bus.Endpoint {
	for i, e := range eps {
		kind, ok := auditedRoutes[e.Route]
		if !ok {
			continue
		}
		h := e.Handler
		eps[i].Handler = func(ctx context.Context, r *bus.Request) (*bus.Response, error) {
			resp, err := h(ctx, r)
			if err != nil || resp == nil || resp.Status >= 300 {
				return resp, err
			}
			if err := s.recordAdmin(ctx, r, resp, kind); err != nil {
				return nil, err
			}
			return resp, nil
		}
	}
	return eps
}

// recordAdmin records one administration request that succeeded: who,
// through which client, in which project, on what.
func (s *Service) recordAdmin(ctx context.Context, r *bus.Request, resp *bus.Response, kind audit.Kind) error {
	if s.audit == nil || r.Principal == nil {
		return nil
	}
	project := r.Param("projectId")
	if project == "" {
		project = r.Principal.Project
	}
	what := "Project/" + project
	switch {
	case kind == audit.ProjectCreated:
		var p struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(resp.Body, &p)
		project, what = p.ID, "Project/"+p.ID
	case r.Param("membershipId") != "":
		what = "ProjectMembership/" + r.Param("membershipId")
	}
	client := ""
	if uuid.Validate(r.Principal.ClientID) == nil {
		client = "ClientApplication/" + r.Principal.ClientID
	}
	e := audit.Event{Kind: kind.Name, Project: project, Who: r.Principal.User, Client: client, Address: r.Remote,
		Entities: []audit.Entity{{What: what, Detail: r.Method + " " + r.Path}}}
	if err := s.audit.Record(ctx, e); err != nil {
		s.log.ErrorContext(ctx, "an administration request succeeded, but the audit trail did not take its event", "route", r.Path, "err", err)
		return fhir.Unavailable("The audit trail is unavailable; the change was made but not recorded")
	}
	return nil
}
