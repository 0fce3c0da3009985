package membership

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/projects"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/scimwire"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/membership/scimproto"
)

// scimEndpoints are SCIM 2.0's routes (docs/scim.md): the project is the
// caller's, and only its admins and admin clients may call them.
func (s *Service) scimEndpoints() []bus.Endpoint {
	return []bus.Endpoint{
		bus.Handle("GET /scim/v2/ServiceProviderConfig", bus.Token, s.scimServiceProviderConfig),
		bus.Handle("GET /scim/v2/ResourceTypes", bus.Token, s.scimResourceTypes),
		bus.Handle("GET /scim/v2/Schemas", bus.Token, s.scimSchemas),
		bus.Handle("GET /scim/v2/ResourceTypes/:id", bus.Token, s.scimResourceType),
		bus.Handle("GET /scim/v2/Schemas/:id", bus.Token, s.scimSchema),
		bus.Handle("GET /scim/v2/Users", bus.Token, s.scimListUsers),
		bus.Handle("POST /scim/v2/Users", bus.Token, s.scimCreateUser),
		bus.Handle("GET /scim/v2/Users/:id", bus.Token, s.scimReadUser),
		bus.Handle("PUT /scim/v2/Users/:id", bus.Token, s.scimReplaceUser),
		bus.Handle("PATCH /scim/v2/Users/:id", bus.Token, s.scimPatchUser),
		bus.Handle("DELETE /scim/v2/Users/:id", bus.Token, s.scimDeleteUser),
		bus.Handle("GET /scim/v2/Groups", bus.Token, s.scimListGroups),
		bus.Handle("GET /scim/v2/Groups/:id", bus.Token, s.scimReadGroup),
		bus.Handle("PATCH /scim/v2/Groups/:id", bus.Token, s.scimPatchGroup),
	}
}

// scimMaxScan bounds the memberships a filter that no index answers reads.
const scimMaxScan = 5000

// scimHandler is a SCIM handler: the project it acts in, the request.
type scimHandler func(ctx context.Context, projectID string, r *bus.Request) (*bus.Response, error)

// scimServe checks the caller administers the token's project and answers
// every refusal in SCIM's error envelope (RFC 7644 §3.12).
func (s *Service) scimServe(ctx context.Context, r *bus.Request, h scimHandler) (*bus.Response, error) {
	var resp *bus.Response
	err := access.Admin(r.Principal)
	if err == nil {
		resp, err = h(ctx, r.Principal.Project, r)
	}
	if err == nil {
		return resp, nil
	}
	e := scimwire.From(err)
	if e.Status >= 500 {
		s.log.Error("scim", "path", r.Path, "err", err)
	}
	out := &bus.Response{Status: e.Status, Header: map[string]string{"Content-Type": scimwire.ContentType}, Body: e.JSON()}
	for k, v := range e.Header {
		out.Header[k] = v
	}
	return out, nil
}

// scimJSON is a SCIM answer.
func scimJSON(status int, v any) *bus.Response {
	b, err := json.Marshal(v)
	if err != nil {
		e := scimwire.New(500, "", "Internal server error")
		return &bus.Response{Status: 500, Header: map[string]string{"Content-Type": scimwire.ContentType}, Body: e.JSON()}
	}
	return &bus.Response{Status: status, Header: map[string]string{"Content-Type": scimwire.ContentType}, Body: b}
}

// scimBody is the request's body, which must be SCIM's JSON or plain JSON.
func scimBody(r *bus.Request) ([]byte, error) {
	if mt := r.MediaType(); mt != scimwire.ContentType && mt != "application/json" {
		return nil, scimwire.New(415, "", "Content-Type must be application/scim+json")
	}
	if len(r.Body) > scimproto.MaxBody {
		return nil, scimwire.New(413, "", "Request body too large")
	}
	return r.Body, nil
}

func (s *Service) scimServiceProviderConfig(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(context.Context, string, *bus.Request) (*bus.Response, error) {
		return scimJSON(200, scimproto.ServiceProviderConfig(s.cfg.BaseURL)), nil
	})
}

func (s *Service) scimResourceTypes(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(context.Context, string, *bus.Request) (*bus.Response, error) {
		list := scimproto.ResourceTypes(s.cfg.BaseURL)
		return scimJSON(200, scimproto.ListResponse(len(list), 1, list)), nil
	})
}

func (s *Service) scimSchemas(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(context.Context, string, *bus.Request) (*bus.Response, error) {
		list := scimproto.Schemas(s.cfg.BaseURL)
		return scimJSON(200, scimproto.ListResponse(len(list), 1, list)), nil
	})
}

// scimResourceType is one of ResourceTypes, by id (User, Group).
func (s *Service) scimResourceType(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(context.Context, string, *bus.Request) (*bus.Response, error) {
		return scimOneOf(scimproto.ResourceTypes(s.cfg.BaseURL), r.Param("id"), "ResourceType")
	})
}

// scimSchema is one of Schemas, by its URI.
func (s *Service) scimSchema(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(context.Context, string, *bus.Request) (*bus.Response, error) {
		return scimOneOf(scimproto.Schemas(s.cfg.BaseURL), r.Param("id"), "Schema")
	})
}

func scimOneOf(list []map[string]any, id, what string) (*bus.Response, error) {
	for _, m := range list {
		if m["id"] == id {
			return scimJSON(200, m), nil
		}
	}
	return nil, scimwire.New(404, "", what+" "+id+" not found")
}

// scimMember is a membership as SCIM reads and writes it.
type scimMember struct {
	ResourceType string          `json:"resourceType"`
	ID           string          `json:"id"`
	User         fhir.Reference  `json:"user"`
	Profile      fhir.Reference  `json:"profile"`
	UserName     string          `json:"userName,omitempty"`
	ExternalID   string          `json:"externalId,omitempty"`
	Active       *bool           `json:"active,omitempty"`
	AccessPolicy *fhir.Reference `json:"accessPolicy,omitempty"`
}

// scimFind reads a person's membership of the project: 404 for another
// project's, a client's or a bot's, or none.
func (s *Service) scimFind(ctx context.Context, projectID, id string) (*repo.Resource, *scimproto.User, error) {
	res, err := s.repo.Read(ctx, repo.Scope{Project: projectID}, "ProjectMembership", id)
	if fhir.Missing(err) {
		return nil, nil, scimwire.New(404, "", "User "+id+" not found")
	}
	if err != nil {
		return nil, nil, err
	}
	u, err := s.scimUser(ctx, res)
	if err != nil {
		return nil, nil, err
	}
	if u == nil {
		return nil, nil, scimwire.New(404, "", "User "+id+" not found")
	}
	return res, u, nil
}

// scimUser is a membership as a SCIM User, nil when it is no person's.
// Names and e-mails are the profile's; userName falls back to the e-mail
// of a member invited before SCIM (Medplum's falls back to the profile id).
func (s *Service) scimUser(ctx context.Context, res *repo.Resource) (*scimproto.User, error) {
	var m scimMember
	if err := json.Unmarshal(res.JSON, &m); err != nil {
		return nil, err
	}
	typ, profileID, _ := fhir.SplitReference(m.Profile.Reference)
	if !scimproto.ProfileTypes[typ] {
		return nil, nil
	}
	active := m.Active == nil || *m.Active
	u := &scimproto.User{
		Schemas: []string{scimproto.UserSchema}, ID: res.ID, ExternalID: m.ExternalID, UserName: m.UserName,
		UserType: typ, Active: &active,
		Meta: &scimproto.Meta{ResourceType: "User", LastModified: res.LastUpdated.UTC().Format("2006-01-02T15:04:05.000Z"),
			Location: s.cfg.BaseURL + "scim/v2/Users/" + res.ID, Version: `W/"` + res.VersionID + `"`},
	}
	prof, err := s.repo.Read(ctx, repo.Scope{Project: res.Project}, typ, profileID)
	if err != nil && !fhir.Missing(err) {
		return nil, err
	}
	if prof != nil {
		var p profileJSON
		_ = json.Unmarshal(prof.JSON, &p)
		if len(p.Name) > 0 {
			n := p.Name[0]
			u.Name = &scimproto.Name{FamilyName: n.Family}
			if len(n.Given) > 0 {
				u.Name.GivenName = n.Given[0]
			}
			u.Name.Formatted = strings.TrimSpace(u.Name.GivenName + " " + u.Name.FamilyName)
		}
		for _, t := range p.Telecom {
			if t.System == "email" && t.Value != "" {
				u.Emails = append(u.Emails, scimproto.Email{Value: t.Value, Type: t.Use, Primary: len(u.Emails) == 0})
			}
		}
	}
	if u.UserName == "" {
		if _, uid, ok := fhir.SplitReference(m.User.Reference); ok {
			if ur, err := s.repo.Read(ctx, repo.AllProjects, "User", uid); err == nil {
				var uj struct {
					Email string `json:"email"`
				}
				_ = json.Unmarshal(ur.JSON, &uj)
				u.UserName = uj.Email
			}
		}
		if u.UserName == "" {
			u.UserName = profileID
		}
	}
	return u, nil
}

// profileJSON is what SCIM reads of a profile.
type profileJSON struct {
	Name []struct {
		Given  []string `json:"given"`
		Family string   `json:"family"`
	} `json:"name"`
	Telecom []struct {
		System string `json:"system"`
		Use    string `json:"use"`
		Value  string `json:"value"`
	} `json:"telecom"`
}

func (s *Service) scimListUsers(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, s.listUsers)
}

// listUsers is GET /scim/v2/Users: the project's people a filter selects,
// ordered by id, one page of them.
func (s *Service) listUsers(ctx context.Context, projectID string, r *bus.Request) (*bus.Response, error) {
	start, count, err := scimPage(r.Query)
	if err != nil {
		return nil, err
	}
	f, err := scimproto.ParseFilter(r.Query.Get("filter"))
	if err != nil {
		return nil, err
	}
	candidates, err := s.scimCandidates(ctx, projectID, f)
	if err != nil {
		return nil, err
	}
	var users []*scimproto.User
	for _, res := range candidates {
		u, err := s.scimUser(ctx, res)
		if err != nil {
			return nil, err
		}
		if u != nil && f.Match(u) {
			users = append(users, u)
		}
	}
	slices.SortFunc(users, func(a, b *scimproto.User) int { return strings.Compare(a.ID, b.ID) })
	total := len(users)
	from := min(start-1, total)
	to := min(from+count, total)
	return scimJSON(200, scimproto.ListResponse(total, start, users[from:to])), nil
}

// scimPage reads startIndex (1-based) and count, bounded (RFC 7644 §3.4.2.4).
func scimPage(q url.Values) (start, count int, err error) {
	start, count = 1, scimproto.DefaultCount
	if v := q.Get("startIndex"); v != "" {
		if start, err = strconv.Atoi(v); err != nil {
			return 0, 0, scimwire.BadRequest(scimwire.InvalidValue, "startIndex must be an integer")
		}
		start = max(start, 1)
	}
	if v := q.Get("count"); v != "" {
		if count, err = strconv.Atoi(v); err != nil {
			return 0, 0, scimwire.BadRequest(scimwire.InvalidValue, "count must be an integer")
		}
		count = min(max(count, 0), scimproto.MaxCount)
	}
	return start, count, nil
}

// scimCandidates are the memberships a filter can select: looked up by
// claim when it asks for one externalId or userName (what a provisioning
// client asks before each create), else the project's, at most
// scimMaxScan of them.
func (s *Service) scimCandidates(ctx context.Context, projectID string, f *scimproto.Filter) ([]*repo.Resource, error) {
	if v, ok := f.Equals("externalId"); ok {
		// The claim holds what invites and SCIM wrote; the search finds an
		// externalId written through the FHIR API, which claims nothing.
		found, err := s.searchMembers(ctx, projectID, "external-id:exact", v)
		if err != nil {
			return nil, err
		}
		id, err := s.repo.ClaimOwner(ctx, repo.ExternalIDKey(projectID, v))
		if err != nil || id == "" || slices.ContainsFunc(found, func(r *repo.Resource) bool { return r.ID == id }) {
			return found, err
		}
		more, err := s.readMembers(ctx, projectID, []string{id})
		return append(found, more...), err
	}
	if v, ok := f.Equals("userName"); ok {
		return s.membersByUserName(ctx, projectID, v)
	}
	var out []*repo.Resource
	for offset := 0; ; offset += search.MaxCount {
		q, err := search.Parse("ProjectMembership", url.Values{
			"profile-type": {"Patient,Practitioner,RelatedPerson"},
			"_count":       {strconv.Itoa(search.MaxCount)}, "_offset": {strconv.Itoa(offset)},
		})
		if err != nil {
			return nil, err
		}
		page, err := s.repo.Search(ctx, repo.Scope{Project: projectID}, "ProjectMembership", q)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Resources...)
		if len(out) > scimMaxScan {
			return nil, scimwire.BadRequest(scimwire.TooMany, "The project has more than 5000 members: filter by userName or externalId eq")
		}
		if !page.More {
			return out, nil
		}
	}
}

// membersByUserName are the memberships whose userName may be v: those
// that store it (a search, which ignores case), and the membership of the
// user signing in with v as e-mail, at either scope (a member invited
// before SCIM, whose userName is their e-mail).
func (s *Service) membersByUserName(ctx context.Context, projectID, v string) ([]*repo.Resource, error) {
	out, err := s.searchMembers(ctx, projectID, "user-name", v)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, scope := range []string{projectID, ""} {
		uid, err := s.repo.ClaimOwner(ctx, repo.UserEmailKey(scope, auth.NormalEmail(v)))
		if err != nil {
			return nil, err
		}
		if uid == "" {
			continue
		}
		mid, err := s.repo.ClaimOwner(ctx, repo.MembershipKey(projectID, "User/"+uid))
		if err != nil {
			return nil, err
		}
		if mid != "" && !slices.ContainsFunc(out, func(r *repo.Resource) bool { return r.ID == mid }) {
			ids = append(ids, mid)
		}
	}
	more, err := s.readMembers(ctx, projectID, ids)
	return append(out, more...), err
}

// searchMembers finds the project's memberships whose search parameter
// param matches v, taken as one value (FHIR's separators escaped).
func (s *Service) searchMembers(ctx context.Context, projectID, param, v string) ([]*repo.Resource, error) {
	escaped := strings.NewReplacer(`\`, `\\`, ",", `\,`, "$", `\$`, "|", `\|`).Replace(v)
	q, err := search.Parse("ProjectMembership", url.Values{param: {escaped}, "_count": {"100"}})
	if err != nil {
		return nil, scimwire.BadRequest(scimwire.InvalidFilter, "The filter's value cannot be searched for")
	}
	page, err := s.repo.Search(ctx, repo.Scope{Project: projectID}, "ProjectMembership", q)
	if err != nil {
		return nil, err
	}
	return page.Resources, nil
}

// readMembers reads memberships of the project by id; gone ones are skipped.
func (s *Service) readMembers(ctx context.Context, projectID string, ids []string) ([]*repo.Resource, error) {
	var out []*repo.Resource
	for _, id := range ids {
		res, err := s.repo.Read(ctx, repo.Scope{Project: projectID}, "ProjectMembership", id)
		if fhir.Missing(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

func (s *Service) scimReadUser(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(ctx context.Context, projectID string, r *bus.Request) (*bus.Response, error) {
		_, u, err := s.scimFind(ctx, projectID, r.Param("id"))
		if err != nil {
			return nil, err
		}
		return scimJSON(200, u), nil
	})
}

func (s *Service) scimCreateUser(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, s.provisionUser)
}

// provisionUser is POST /scim/v2/Users: an invite without e-mail (the
// identity provider signs the person in), whose membership carries
// userName, externalId and active: provisioning, in SCIM's terms, of a
// member of the project (not identity's createUser, a sign-in's request
// for a new account).
func (s *Service) provisionUser(ctx context.Context, projectID string, r *bus.Request) (*bus.Response, error) {
	body, err := scimBody(r)
	if err != nil {
		return nil, err
	}
	u, err := scimproto.DecodeUser(body)
	if err != nil {
		return nil, err
	}
	if u.Name == nil || u.Name.GivenName == "" || u.Name.FamilyName == "" {
		return nil, scimwire.BadRequest(scimwire.InvalidValue, "name.givenName and name.familyName are required")
	}
	taken, err := s.userNameTaken(ctx, projectID, u.UserName, "")
	if err != nil {
		return nil, err
	}
	if taken {
		return nil, scimwire.New(409, scimwire.Uniqueness, "userName "+u.UserName+" is taken in this project")
	}
	typ := u.UserType
	if typ == "" {
		typ = "Practitioner"
	}
	membership := map[string]any{"userName": u.UserName, "active": u.Active == nil || *u.Active}
	if typ == "Patient" {
		// As in Medplum: a patient provisioned without the project's
		// patient policy would see every patient.
		policy, err := s.defaultPatientPolicy(ctx, projectID)
		if err != nil {
			return nil, err
		}
		if policy == "" {
			return nil, scimwire.BadRequest(scimwire.InvalidValue, "The project has no defaultPatientAccessPolicy for Patient users")
		}
		membership["accessPolicy"] = map[string]any{"reference": policy}
	}
	invite := map[string]any{
		"resourceType": typ, "firstName": u.Name.GivenName, "lastName": u.Name.FamilyName,
		"sendEmail": false, "membership": membership,
	}
	if e := u.PrimaryEmail(); e != "" {
		invite["email"] = e
	}
	if u.ExternalID != "" {
		invite["externalId"] = u.ExternalID
	}
	pm, err := s.inviteMember(ctx, r.Principal, projectID, invite)
	if err != nil {
		return nil, err
	}
	out, err := s.scimUser(ctx, pm)
	if err != nil {
		return nil, err
	}
	resp := scimJSON(201, out)
	resp.Header["Location"] = out.Meta.Location
	return resp, nil
}

// defaultPatientPolicy is the project's defaultPatientAccessPolicy, if any.
func (s *Service) defaultPatientPolicy(ctx context.Context, projectID string) (string, error) {
	res, err := projects.Read(ctx, s.repo, projectID)
	if err != nil {
		return "", err
	}
	var p struct {
		Policy *fhir.Reference `json:"defaultPatientAccessPolicy"`
	}
	_ = json.Unmarshal(res.JSON, &p)
	if p.Policy == nil {
		return "", nil
	}
	return p.Policy.Reference, nil
}

// userNameTaken reports whether another membership of the project than
// except has userName, compared without case (RFC 7643: userName is
// unique and not case-exact).
func (s *Service) userNameTaken(ctx context.Context, projectID, userName, except string) (bool, error) {
	list, err := s.membersByUserName(ctx, projectID, userName)
	if err != nil {
		return false, err
	}
	for _, res := range list {
		if res.ID == except {
			continue
		}
		u, err := s.scimUser(ctx, res)
		if err != nil {
			return false, err
		}
		if u != nil && strings.EqualFold(u.UserName, userName) {
			return true, nil
		}
	}
	return false, nil
}

func (s *Service) scimReplaceUser(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(ctx context.Context, projectID string, r *bus.Request) (*bus.Response, error) {
		res, cur, err := s.scimFind(ctx, projectID, r.Param("id"))
		if err != nil {
			return nil, err
		}
		body, err := scimBody(r)
		if err != nil {
			return nil, err
		}
		next, err := scimproto.DecodeUser(body)
		if err != nil {
			return nil, err
		}
		if next.Active == nil {
			next.Active = cur.Active // as Medplum: a PUT without active keeps it
		}
		return s.saveUser(ctx, r, res, cur, next)
	})
}

func (s *Service) scimPatchUser(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(ctx context.Context, projectID string, r *bus.Request) (*bus.Response, error) {
		res, cur, err := s.scimFind(ctx, projectID, r.Param("id"))
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
		next, err := op.Apply(cur)
		if err != nil {
			return nil, err
		}
		return s.saveUser(ctx, r, res, cur, next)
	})
}

// saveUser writes what a PUT or PATCH changed: userName, externalId and
// active on the membership, name and e-mail on the profile. A change of
// active reaches the session entry before the answer, so a deactivated
// person's tokens fail at once (and work again on reactivation).
func (s *Service) saveUser(ctx context.Context, r *bus.Request, res *repo.Resource, cur, next *scimproto.User) (*bus.Response, error) {
	if next.UserType != "" && next.UserType != cur.UserType {
		return nil, scimwire.BadRequest(scimwire.Mutability, "userType cannot be changed")
	}
	if next.Active == nil {
		t := true
		next.Active = &t
	}
	projectID := res.Project
	if !strings.EqualFold(next.UserName, cur.UserName) {
		taken, err := s.userNameTaken(ctx, projectID, next.UserName, res.ID)
		if err != nil {
			return nil, err
		}
		if taken {
			return nil, scimwire.New(409, scimwire.Uniqueness, "userName "+next.UserName+" is taken in this project")
		}
	}
	if next.ExternalID != cur.ExternalID && next.ExternalID != "" {
		owner, err := s.repo.Claim(ctx, repo.ExternalIDKey(projectID, next.ExternalID), res.ID)
		if err != nil {
			return nil, err
		}
		if owner != res.ID {
			return nil, scimwire.New(409, scimwire.Uniqueness, "externalId "+next.ExternalID+" is taken in this project")
		}
	}
	opts := repo.WriteOptions{Author: r.Principal.Profile}
	if err := s.saveProfile(ctx, res, cur, next, opts); err != nil {
		return nil, err
	}
	out, err := s.repo.Modify(ctx, repo.Scope{Project: projectID}, "ProjectMembership", res.ID, opts, func(c *repo.Resource) (map[string]any, error) {
		m, err := c.Decode()
		if err != nil {
			return nil, err
		}
		setOrDelete(m, "userName", next.UserName)
		setOrDelete(m, "externalId", next.ExternalID)
		m["active"] = *next.Active
		return m, nil
	})
	if err != nil {
		return nil, err
	}
	if cur.ExternalID != "" && cur.ExternalID != next.ExternalID {
		if err := s.repo.Release(ctx, repo.ExternalIDKey(projectID, cur.ExternalID), res.ID); err != nil {
			return nil, err
		}
	}
	rev, err := projects.Project(ctx, s.nc, "ProjectMembership", res.ID, projectID)
	if err != nil {
		return nil, err
	}
	u, err := s.scimUser(ctx, out)
	if err != nil {
		return nil, err
	}
	return scimJSON(200, u).WithSession(session.MembershipsBucket, rev), nil
}

// saveProfile writes a changed name or primary e-mail onto the profile;
// its other names and telecoms stay. The User's sign-in e-mail is not
// changed (docs/scim.md).
func (s *Service) saveProfile(ctx context.Context, res *repo.Resource, cur, next *scimproto.User, opts repo.WriteOptions) error {
	given, family := "", ""
	if next.Name != nil {
		given, family = next.Name.GivenName, next.Name.FamilyName
	}
	curGiven, curFamily := "", ""
	if cur.Name != nil {
		curGiven, curFamily = cur.Name.GivenName, cur.Name.FamilyName
	}
	email := ""
	if len(next.Emails) > 0 {
		email = next.PrimaryEmail()
	}
	curEmail := ""
	if len(cur.Emails) > 0 {
		curEmail = cur.PrimaryEmail()
	}
	if given == curGiven && family == curFamily && strings.EqualFold(email, curEmail) {
		return nil
	}
	var m scimMember
	_ = json.Unmarshal(res.JSON, &m)
	typ, id, _ := fhir.SplitReference(m.Profile.Reference)
	_, err := s.repo.Modify(ctx, repo.Scope{Project: res.Project}, typ, id, opts, func(c *repo.Resource) (map[string]any, error) {
		p, err := c.Decode()
		if err != nil {
			return nil, err
		}
		names, _ := p["name"].([]any)
		first := map[string]any{}
		if len(names) > 0 {
			if n, ok := names[0].(map[string]any); ok {
				first = n
			}
		} else {
			names = []any{first}
		}
		if given != "" {
			first["given"] = []any{given}
		} else {
			delete(first, "given")
		}
		setOrDelete(first, "family", family)
		names[0] = first
		p["name"] = names
		var telecom []any
		replaced := false
		list, _ := p["telecom"].([]any)
		for _, t := range list {
			tm, _ := t.(map[string]any)
			if tm != nil && tm["system"] == "email" && !replaced {
				replaced = true
				if email == "" {
					continue
				}
				tm["value"] = email
			}
			telecom = append(telecom, t)
		}
		if !replaced && email != "" {
			telecom = append(telecom, map[string]any{"system": "email", "use": "work", "value": email})
		}
		if len(telecom) > 0 {
			p["telecom"] = telecom
		} else {
			delete(p, "telecom")
		}
		return p, nil
	})
	return err
}

func setOrDelete(m map[string]any, k, v string) {
	if v == "" {
		delete(m, k)
		return
	}
	m[k] = v
}

func (s *Service) scimDeleteUser(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return s.scimServe(ctx, r, func(ctx context.Context, projectID string, r *bus.Request) (*bus.Response, error) {
		res, _, err := s.scimFind(ctx, projectID, r.Param("id"))
		if err != nil {
			return nil, err
		}
		rev, err := s.removeMember(ctx, res)
		if err != nil {
			return nil, err
		}
		return (&bus.Response{Status: 204, Header: map[string]string{}}).WithSession(session.MembershipsBucket, rev), nil
	})
}
