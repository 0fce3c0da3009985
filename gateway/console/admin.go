package console

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// project is what the project page shows.
type project struct {
	ID, Name, Owner string
	Features        []string
	Secrets         []secret
	raw             []map[string]any // the secrets as stored, sent back whole
}

type secret struct{ Name, Masked string }

// readProject reads the project as its administrator, through the API's
// GET /admin/projects/:id.
func (c *Console) readProject(fc *fiber.Ctx, s *session) (*project, string, error) {
	resp, err := c.call(fc, s.who, "GET", "/admin/projects/"+s.who.Project,
		map[string]string{"projectId": s.who.Project}, nil, "", nil)
	if err != nil {
		return nil, "", err
	}
	if resp.Status != 200 {
		return nil, failure(resp), nil
	}
	var body struct {
		Project struct {
			ID       string           `json:"id"`
			Name     string           `json:"name"`
			Owner    fhir.Reference   `json:"owner"`
			Features []string         `json:"features"`
			Secret   []map[string]any `json:"secret"`
		} `json:"project"`
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		return nil, "", err
	}
	p := &project{ID: body.Project.ID, Name: body.Project.Name, Features: body.Project.Features, raw: body.Project.Secret}
	if p.Owner = body.Project.Owner.Display; p.Owner == "" {
		p.Owner = body.Project.Owner.Reference
	}
	for _, sec := range body.Project.Secret {
		name, _ := sec["name"].(string)
		p.Secrets = append(p.Secrets, secret{Name: name, Masked: mask(sec)})
	}
	return p, "", nil
}

// mask shows a secret's kind and at most its last two characters.
func mask(sec map[string]any) string {
	for k, v := range sec {
		if !strings.HasPrefix(k, "value") {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return "(" + strings.TrimPrefix(k, "value") + ")"
		}
		if len(s) <= 6 {
			return "••••••"
		}
		return "••••••" + s[len(s)-2:]
	}
	return ""
}

// home is the project page.
func (c *Console) home(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	return c.showProject(fc, s, 200, notices[fc.Query("done")], "")
}

func (c *Console) showProject(fc *fiber.Ctx, s *session, status int, notice, problem string) error {
	p, refused, err := c.readProject(fc, s)
	if err != nil {
		return err
	}
	if refused != "" {
		return c.message(fc, 403, "Not allowed", refused)
	}
	return c.render(fc, status, "project", page{Title: p.Name, CSRF: s.csrf(), Project: p, Notice: notice, Problem: problem})
}

// notices are the messages a page shows after a change, by the code the
// change redirects with (never text from the URL).
var notices = map[string]string{
	"secret":  "The secret was saved.",
	"removed": "The secret was removed.",
	"member":  "The member was removed; their tokens no longer work.",
	"invited": "The invitation was made.",
	"saved":   "The membership was saved.",
	"mfa":     "The member's authenticator, recovery codes and passkeys were removed.",
}

// secrets adds, replaces or removes one project secret: the project's list
// is read, changed in that one entry, and sent back whole, as the API's
// POST /admin/projects/:id/secrets takes it.
func (c *Console) secrets(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	p, refused, err := c.readProject(fc, s)
	if err != nil {
		return err
	}
	if refused != "" {
		return c.message(fc, 403, "Not allowed", refused)
	}
	list := make([]map[string]any, 0, len(p.raw)+1)
	done := "removed"
	if name := fc.FormValue("remove"); name != "" {
		for _, sec := range p.raw {
			if sec["name"] != name {
				list = append(list, sec)
			}
		}
	} else {
		name := strings.TrimSpace(fc.FormValue("name"))
		entry := map[string]any{"name": name, "valueString": fc.FormValue("value")}
		replaced := false
		for _, sec := range p.raw {
			if sec["name"] == name {
				sec, replaced = entry, true
			}
			list = append(list, sec)
		}
		if !replaced {
			list = append(list, entry)
		}
		done = "secret"
	}
	body, _ := json.Marshal(list)
	resp, err := c.call(fc, s.who, "POST", "/admin/projects/"+s.who.Project+"/secrets",
		map[string]string{"projectId": s.who.Project}, nil, "application/json", body)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.showProject(fc, s, resp.Status, "", failure(resp))
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console?done="+done, fiber.StatusSeeOther)
}

// member is one row of the members page.
type member struct {
	ID, Name, Type, Profile, Policy string
	Email                           string
	User                            string // the user reference: User/…, or a client's or bot's own
	PolicyRef                       string // the one accessPolicy, for the edit form
	Admin, Active, Removable        bool
	MFA                             string // "enrolled", "not enrolled", ", passkeys n" after either (mfa.go)
	// ExternalID is the membership's externalId: the subject its
	// organisation's provider (or SCIM) knows the person by.
	ExternalID string
}

// profileTypes are the kinds of member a project has.
var profileTypes = []string{"Practitioner", "Patient", "RelatedPerson", "ClientApplication", "Bot"}

const membersPage = 50

// members lists the project's memberships, through the API's search.
func (c *Console) members(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	filter := fc.Query("type")
	offset, _ := strconv.Atoi(fc.Query("offset"))
	offset = max(offset, 0)
	q := url.Values{"_count": {strconv.Itoa(membersPage)}, "_offset": {strconv.Itoa(offset)}}
	for _, t := range profileTypes {
		if t == filter {
			q.Set("profile-type", t)
		}
	}
	resp, err := c.call(fc, s.who, "GET", "/fhir/R4/ProjectMembership",
		map[string]string{"type": "ProjectMembership"}, q, "", nil)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Members", failure(resp))
	}
	var b struct {
		Entry []struct {
			Resource json.RawMessage `json:"resource"`
		} `json:"entry"`
		Link []struct {
			Relation string `json:"relation"`
		} `json:"link"`
	}
	if err := json.Unmarshal(resp.Body, &b); err != nil {
		return err
	}
	d := page{Title: "Members", CSRF: s.csrf(), Project: &project{}, Types: profileTypes, Filter: filter, Notice: notices[fc.Query("done")]}
	for _, e := range b.Entry {
		m, err := memberOf(e.Resource, s)
		if err != nil {
			return err
		}
		d.Members = append(d.Members, m)
	}
	if err := c.mfaStates(fc, s, d.Members); err != nil {
		return err
	}
	for _, l := range b.Link {
		if l.Relation == "next" {
			d.Next = c.cfg.BaseURL + "console/members?" + url.Values{"type": {filter}, "offset": {strconv.Itoa(offset + membersPage)}}.Encode()
		}
	}
	return c.render(fc, 200, "members", d)
}

// memberOf reads a ProjectMembership for the pages.
func memberOf(raw []byte, s *session) (member, error) {
	var pm struct {
		ID           string          `json:"id"`
		Profile      fhir.Reference  `json:"profile"`
		User         fhir.Reference  `json:"user"`
		Admin        bool            `json:"admin"`
		Active       *bool           `json:"active"`
		ExternalID   string          `json:"externalId"`
		AccessPolicy *fhir.Reference `json:"accessPolicy"`
		Access       []struct {
			Policy fhir.Reference `json:"policy"`
		} `json:"access"`
	}
	if err := json.Unmarshal(raw, &pm); err != nil {
		return member{}, err
	}
	typ, _, _ := fhir.SplitReference(pm.Profile.Reference)
	m := member{
		ID: pm.ID, Name: pm.Profile.Display, Type: typ, Profile: pm.Profile.Reference, User: pm.User.Reference, Admin: pm.Admin,
		Active:    pm.Active == nil || *pm.Active,
		Removable: pm.ID != s.who.Membership, ExternalID: pm.ExternalID,
	}
	if m.Name == "" {
		m.Name = pm.Profile.Reference
	}
	// A person's user is shown by their e-mail; a client's or bot's by its name.
	if strings.Contains(pm.User.Display, "@") {
		m.Email = pm.User.Display
	}
	var policies []string
	if pm.AccessPolicy != nil {
		policies = append(policies, policyName(*pm.AccessPolicy))
		m.PolicyRef = pm.AccessPolicy.Reference
	}
	for _, a := range pm.Access {
		policies = append(policies, policyName(a.Policy))
		if m.PolicyRef == "" {
			m.PolicyRef = a.Policy.Reference
		}
	}
	m.Policy = strings.Join(policies, ", ")
	return m, nil
}

func policyName(r fhir.Reference) string {
	if r.Display != "" {
		return r.Display
	}
	return r.Reference
}

// readMember reads one membership of the project through the API's
// GET /admin/projects/:id/members/:membershipId.
func (c *Console) readMember(fc *fiber.Ctx, s *session) (*member, *bus.Response, error) {
	id := fc.Params("id")
	resp, err := c.call(fc, s.who, "GET", "/admin/projects/"+s.who.Project+"/members/"+id,
		map[string]string{"projectId": s.who.Project, "membershipId": id}, nil, "", nil)
	if err != nil || resp.Status != 200 {
		return nil, resp, err
	}
	m, err := memberOf(resp.Body, s)
	return &m, resp, err
}

// memberPage starts a page about one membership: the signed-in
// administrator and the member; nil, with the page answered, when either
// is refused.
func (c *Console) memberPage(fc *fiber.Ctx, title string) (*session, *member, error) {
	s, err := c.signedIn(fc)
	if s == nil {
		return nil, nil, err
	}
	m, resp, err := c.readMember(fc, s)
	if err != nil {
		return nil, nil, err
	}
	if m == nil {
		return nil, nil, c.message(fc, resp.Status, title, failure(resp))
	}
	return s, m, nil
}

// confirmRemove is the Remove User action's confirmation: who goes, and
// what stays.
func (c *Console) confirmRemove(fc *fiber.Ctx) error {
	s, m, err := c.memberPage(fc, "Remove member")
	if s == nil {
		return err
	}
	p, _, err := c.readProject(fc, s)
	if err != nil || p == nil {
		p = &project{Name: "this project"}
	}
	return c.render(fc, 200, "remove", page{Title: "Remove " + m.Name, CSRF: s.csrf(), Member: m, Project: p})
}

// remove deletes the membership, through the API's
// DELETE /admin/projects/:id/members/:membershipId.
func (c *Console) remove(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	id := fc.Params("id")
	if id == s.who.Membership {
		return c.message(fc, 400, "Remove member", "You cannot remove your own membership here.")
	}
	resp, err := c.call(fc, s.who, "DELETE", "/admin/projects/"+s.who.Project+"/members/"+id,
		map[string]string{"projectId": s.who.Project, "membershipId": id}, nil, "", nil)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Remove member", failure(resp))
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/members?done=member", fiber.StatusSeeOther)
}
