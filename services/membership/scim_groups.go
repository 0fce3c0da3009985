package membership

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"

	filter "github.com/scim2/filter-parser/v2"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/scimwire"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/membership/scimproto"
)

// SCIM Groups are the project's access policies (docs/scim.md): a group's
// members are the memberships whose accessPolicy is that policy, so adding
// a person to a group in the identity provider gives them its rights.
// Groups are written in Pinion (the console, the FHIR API), not by SCIM.

// scimGroup is an AccessPolicy as a SCIM Group.
type scimGroup struct {
	Schemas     []string       `json:"schemas"`
	ID          string         `json:"id"`
	DisplayName string         `json:"displayName"`
	Members     []groupMember  `json:"members,omitempty"`
	Meta        scimproto.Meta `json:"meta"`
}

type groupMember struct {
	Value   string `json:"value"`
	Display string `json:"display,omitempty"`
	Ref     string `json:"$ref,omitempty"`
}

func (s *Service) scimListGroups(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(ctx context.Context, projectID string, r *bus.Request) (*bus.Response, error) {
		start, count, err := scimPage(r.Query)
		if err != nil {
			return nil, err
		}
		name, err := groupFilter(r.Query.Get("filter"))
		if err != nil {
			return nil, err
		}
		q, err := search.Parse("AccessPolicy", url.Values{"_count": {strconv.Itoa(search.MaxCount)}})
		if err != nil {
			return nil, err
		}
		page, err := s.repo.Search(ctx, repo.Scope{Project: projectID}, "AccessPolicy", q)
		if err != nil {
			return nil, err
		}
		withMembers := !strings.Contains(strings.ToLower(r.Query.Get("excludedAttributes")), "members")
		var groups []*scimGroup
		for _, res := range page.Resources {
			g := s.groupOf(res)
			if name != nil && !strings.EqualFold(g.DisplayName, *name) {
				continue
			}
			groups = append(groups, g)
		}
		total := len(groups)
		from := min(start-1, total)
		to := min(from+count, total)
		groups = groups[from:to]
		if withMembers {
			for _, g := range groups {
				if g.Members, err = s.groupMembers(ctx, projectID, g.ID); err != nil {
					return nil, err
				}
			}
		}
		return scimJSON(200, scimproto.ListResponse(total, start, groups)), nil
	})
}

// groupFilter reads the one filter a Group list takes, displayName eq:
// what Okta and Entra ID ask before pushing a group.
func groupFilter(s string) (*string, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) > scimproto.MaxFilter {
		return nil, scimwire.BadRequest(scimwire.InvalidFilter, "The filter is longer than 1024 characters")
	}
	e, err := filter.ParseFilter([]byte(s))
	if err != nil {
		return nil, scimwire.BadRequest(scimwire.InvalidFilter, "The filter could not be parsed")
	}
	ae, ok := e.(*filter.AttributeExpression)
	if !ok || !strings.EqualFold(ae.AttributePath.AttributeName, "displayName") || ae.Operator != filter.EQ {
		return nil, scimwire.BadRequest(scimwire.InvalidFilter, "Groups are filtered by displayName eq only")
	}
	v, ok := ae.CompareValue.(string)
	if !ok {
		return nil, scimwire.BadRequest(scimwire.InvalidFilter, "displayName is compared with a string")
	}
	return &v, nil
}

func (s *Service) groupOf(res *repo.Resource) *scimGroup {
	var p struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(res.JSON, &p)
	if p.Name == "" {
		p.Name = res.ID
	}
	return &scimGroup{Schemas: []string{scimproto.GroupSchema}, ID: res.ID, DisplayName: p.Name,
		Meta: scimproto.Meta{ResourceType: "Group", LastModified: res.LastUpdated.UTC().Format("2006-01-02T15:04:05.000Z"),
			Location: s.cfg.BaseURL + "scim/v2/Groups/" + res.ID, Version: `W/"` + res.VersionID + `"`}}
}

// groupMembers are the people whose membership names the policy.
func (s *Service) groupMembers(ctx context.Context, projectID, policyID string) ([]groupMember, error) {
	q, err := search.Parse("ProjectMembership", url.Values{"access-policy": {"AccessPolicy/" + policyID}, "_count": {strconv.Itoa(search.MaxCount)}})
	if err != nil {
		return nil, err
	}
	page, err := s.repo.Search(ctx, repo.Scope{Project: projectID}, "ProjectMembership", q)
	if err != nil {
		return nil, err
	}
	var out []groupMember
	for _, res := range page.Resources {
		u, err := s.scimUser(ctx, res)
		if err != nil {
			return nil, err
		}
		if u != nil {
			out = append(out, groupMember{Value: u.ID, Display: u.UserName, Ref: u.Meta.Location})
		}
	}
	return out, nil
}

// scimFindGroup reads an access policy of the project.
func (s *Service) scimFindGroup(ctx context.Context, projectID, id string) (*scimGroup, error) {
	res, err := s.repo.Read(ctx, repo.Scope{Project: projectID}, "AccessPolicy", id)
	if fhir.Missing(err) {
		return nil, scimwire.New(404, "", "Group "+id+" not found")
	}
	if err != nil {
		return nil, err
	}
	return s.groupOf(res), nil
}

func (s *Service) scimReadGroup(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(ctx context.Context, projectID string, r *bus.Request) (*bus.Response, error) {
		g, err := s.scimFindGroup(ctx, projectID, r.Param("id"))
		if err != nil {
			return nil, err
		}
		if g.Members, err = s.groupMembers(ctx, projectID, g.ID); err != nil {
			return nil, err
		}
		return scimJSON(200, g), nil
	})
}

func (s *Service) scimPatchGroup(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, s.patchGroup)
}

// patchGroup is PATCH /scim/v2/Groups/:id on its members: add gives each
// member the group's policy as their accessPolicy (in place of the one
// they had), remove takes it away when it is theirs, replace does both.
// Other attributes (displayName) are the policy's, and refused.
func (s *Service) patchGroup(ctx context.Context, projectID string, r *bus.Request) (*bus.Response, error) {
	g, err := s.scimFindGroup(ctx, projectID, r.Param("id"))
	if err != nil {
		return nil, err
	}
	body, err := scimBody(r)
	if err != nil {
		return nil, err
	}
	op, err := scimproto.DecodePatch(body)
	if err != nil {
		return nil, err
	}
	current, err := s.groupMembers(ctx, projectID, g.ID)
	if err != nil {
		return nil, err
	}
	has := map[string]bool{}
	for _, m := range current {
		has[m.Value] = true
	}
	want := map[string]bool{}
	for k := range has {
		want[k] = true
	}
	for _, o := range op.Operations {
		ids, all, err := groupOperation(o, g.DisplayName)
		if errors.Is(err, errNoMembers) {
			continue
		}
		if err != nil {
			return nil, err
		}
		switch {
		case o.Op == "replace":
			want = map[string]bool{}
			for _, id := range ids {
				want[id] = true
			}
		case o.Op == "add":
			for _, id := range ids {
				want[id] = true
			}
		case all:
			want = map[string]bool{}
		default:
			for _, id := range ids {
				delete(want, id)
			}
		}
	}
	policy := "AccessPolicy/" + g.ID
	var rev uint64
	set := func(id string, add bool) error {
		res, _, err := s.scimFind(ctx, projectID, id)
		if err != nil {
			return err
		}
		_, err = s.repo.Modify(ctx, repo.Scope{Project: projectID}, "ProjectMembership", res.ID, repo.WriteOptions{Author: r.Principal.Profile}, func(c *repo.Resource) (map[string]any, error) {
			m, err := c.Decode()
			if err != nil {
				return nil, err
			}
			ref, _ := refOf(m["accessPolicy"])
			switch {
			case add:
				m["accessPolicy"] = map[string]any{"reference": policy}
			case ref == policy:
				delete(m, "accessPolicy")
			default:
				return nil, nil
			}
			return m, nil
		})
		if err != nil {
			return err
		}
		n, err := projects.Project(ctx, s.nc, "ProjectMembership", res.ID, projectID)
		rev = max(rev, n)
		return err
	}
	for id := range want {
		if !has[id] {
			if err := set(id, true); err != nil {
				return nil, err
			}
		}
	}
	for id := range has {
		if !want[id] {
			if err := set(id, false); err != nil {
				return nil, err
			}
		}
	}
	if g.Members, err = s.groupMembers(ctx, projectID, g.ID); err != nil {
		return nil, err
	}
	return scimJSON(200, g).WithSession(session.MembershipsBucket, rev), nil
}

// errNoMembers is groupOperation's answer for an operation that names no
// members (Entra's echo of the group's own name): it changes nothing.
var errNoMembers = errors.New("no members named")

// groupOperation reads which members one Group PATCH operation names:
// the values of [{"value": id}] (path "members", or no path and a
// {"members": [...]} value), or the one a path members[value eq "id"]
// selects; all is a remove of every member (path "members", no value).
func groupOperation(o scimproto.Operation, displayName string) (ids []string, all bool, err error) {
	path := strings.TrimSpace(o.Path)
	var raw json.RawMessage = o.Value
	if path == "" {
		raw = nil
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(o.Value, &obj); err != nil {
			return nil, false, scimwire.BadRequest(scimwire.InvalidValue, "Without a path, the value must be an object")
		}
		for k, v := range obj {
			switch strings.ToLower(k) {
			case "members":
				raw = v
			case "displayname":
				// Entra ID sends the group's name back: only a change is refused.
				var name string
				if json.Unmarshal(v, &name) != nil || name != displayName {
					return nil, false, scimwire.BadRequest(scimwire.Mutability, "A group's displayName is its access policy's name, changed in Pinion")
				}
			case "id", "schemas", "meta":
			default:
				return nil, false, scimwire.BadRequest(scimwire.Mutability, "Only a group's members can be changed")
			}
		}
		if raw == nil {
			return nil, false, errNoMembers
		}
		path = "members"
	}
	if strings.EqualFold(path, "members") {
		if len(raw) == 0 {
			return nil, o.Op == "remove", nil
		}
		var list []struct {
			Value string `json:"value"`
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, false, scimwire.BadRequest(scimwire.InvalidValue, "members must be a list of {value}")
		}
		if len(list) > scimproto.MaxCount {
			return nil, false, scimwire.BadRequest(scimwire.TooMany, "At most 200 members per operation")
		}
		for _, m := range list {
			ids = append(ids, m.Value)
		}
		return ids, false, nil
	}
	p, err := filter.ParsePath([]byte(path))
	if err != nil || !strings.EqualFold(p.AttributePath.AttributeName, "members") || p.ValueExpression == nil {
		return nil, false, scimwire.BadRequest(scimwire.InvalidPath, "Only a group's members can be changed")
	}
	if ae, ok := p.ValueExpression.(*filter.AttributeExpression); ok && ae.Operator == filter.EQ && strings.EqualFold(ae.AttributePath.AttributeName, "value") {
		if v, ok := ae.CompareValue.(string); ok {
			return []string{v}, false, nil
		}
	}
	return nil, false, scimwire.BadRequest(scimwire.InvalidPath, `Members are selected by members[value eq "<id>"]`)
}
