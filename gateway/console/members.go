package console

import (
	"encoding/json"
	"net/url"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// policyOption is an access policy of the project, for the forms.
type policyOption struct{ ID, Ref, Name string }

// policies lists the project's access policies, through the API's search.
func (c *Console) policies(fc *fiber.Ctx, s *session) ([]policyOption, error) {
	resp, err := c.call(fc, s.who, "GET", "/fhir/R4/AccessPolicy",
		map[string]string{"type": "AccessPolicy"}, url.Values{"_count": {"200"}, "_sort": {"name"}}, "", nil)
	if err != nil || resp.Status != 200 {
		return nil, err
	}
	var b struct {
		Entry []struct {
			Resource struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"resource"`
		} `json:"entry"`
	}
	if err := json.Unmarshal(resp.Body, &b); err != nil {
		return nil, err
	}
	out := make([]policyOption, 0, len(b.Entry))
	for _, e := range b.Entry {
		name := e.Resource.Name
		if name == "" {
			name = "AccessPolicy/" + e.Resource.ID
		}
		out = append(out, policyOption{ID: e.Resource.ID, Ref: "AccessPolicy/" + e.Resource.ID, Name: name})
	}
	return out, nil
}

// inviteFields maps the invite's error expressions to the form's fields.
var inviteFields = map[string]string{
	"firstName": "firstName", "lastName": "lastName", "email": "email", "patient": "patient",
	"resourceType": "resourceType", "membership.accessPolicy": "policy", "membership.access.policy": "policy",
}

func (c *Console) inviteForm(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	return c.showInvite(fc, s, 200, map[string]string{}, nil, "")
}

func (c *Console) showInvite(fc *fiber.Ctx, s *session, status int, form, errs map[string]string, problem string) error {
	pols, err := c.policies(fc, s)
	if err != nil {
		return err
	}
	return c.render(fc, status, "invite", page{Title: "Invite someone", CSRF: s.csrf(), Project: &project{}, Form: form, Errors: errs,
		Problem: problem, Policies: pols, ProfileKinds: []string{"Practitioner", "Patient", "RelatedPerson"}})
}

// invite is the API's invite (E2) with the form's fields.
func (c *Console) invite(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	form := map[string]string{}
	for _, k := range []string{"resourceType", "firstName", "lastName", "email", "patient", "policy", "paramName", "paramValue", "admin", "sendEmail"} {
		form[k] = strings.TrimSpace(fc.FormValue(k))
	}
	body := map[string]any{
		"resourceType": form["resourceType"], "firstName": form["firstName"], "lastName": form["lastName"],
		"email": form["email"], "admin": form["admin"] == "true", "sendEmail": form["sendEmail"] == "true",
	}
	if form["patient"] != "" {
		body["patient"] = map[string]any{"reference": form["patient"]}
	}
	if form["policy"] != "" {
		entry := map[string]any{"policy": map[string]any{"reference": form["policy"]}}
		if form["paramName"] != "" {
			entry["parameter"] = []any{parameter(form["paramName"], form["paramValue"])}
		}
		body["membership"] = map[string]any{"access": []any{entry}}
	}
	raw, _ := json.Marshal(body)
	resp, err := c.call(fc, s.who, "POST", "/admin/projects/"+s.who.Project+"/invite",
		map[string]string{"projectId": s.who.Project}, nil, "application/json", raw)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		errs, rest := fieldErrors(resp, inviteFields)
		return c.showInvite(fc, s, resp.Status, form, errs, rest)
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/members?done=invited", fiber.StatusSeeOther)
}

// parameter is an access policy parameter: a reference when the value
// looks like one (Patient/123), else a string.
func parameter(name, value string) map[string]any {
	if _, _, ok := fhir.SplitReference(value); ok && !strings.Contains(value, " ") {
		return map[string]any{"name": name, "valueReference": map[string]any{"reference": value}}
	}
	return map[string]any{"name": name, "valueString": value}
}

// editMember shows one membership: promote or demote it, change its
// access policy (E3).
func (c *Console) editMember(fc *fiber.Ctx) error {
	s, m, err := c.memberPage(fc, "Member")
	if s == nil {
		return err
	}
	pols, err := c.policies(fc, s)
	if err != nil {
		return err
	}
	one := []member{*m}
	if err := c.mfaStates(fc, s, one); err != nil {
		return err
	}
	m.MFA = one[0].MFA
	return c.render(fc, 200, "member", page{Title: m.Name, CSRF: s.csrf(), Project: &project{}, Member: m, Policies: pols,
		Notice: notices[fc.Query("done")]})
}

// saveMember writes the membership back with the form's admin flag and
// access policy, through the API's POST /admin/projects/:id/members/:id.
func (c *Console) saveMember(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	id := fc.Params("id")
	params := map[string]string{"projectId": s.who.Project, "membershipId": id}
	path := "/admin/projects/" + s.who.Project + "/members/" + id
	resp, err := c.call(fc, s.who, "GET", path, params, nil, "", nil)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Member", failure(resp))
	}
	cur, err := memberOf(resp.Body, s)
	if err != nil {
		return err
	}
	pm, err := fhir.Decode(resp.Body)
	if err != nil {
		return err
	}
	pm["admin"] = fc.FormValue("admin") == "true"
	// The policy is rewritten only when it changed: an unchanged one keeps
	// its parameters.
	switch ref := fc.FormValue("policy"); {
	case ref == cur.PolicyRef:
	case ref == "":
		delete(pm, "accessPolicy")
		delete(pm, "access")
	default:
		pm["accessPolicy"] = map[string]any{"reference": ref}
		delete(pm, "access")
	}
	raw, _ := json.Marshal(pm)
	resp, err = c.call(fc, s.who, "POST", path, params, nil, "application/json", raw)
	if err != nil {
		return err
	}
	if resp.Status != 200 {
		return c.message(fc, resp.Status, "Member", failure(resp))
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/members?done=saved", fiber.StatusSeeOther)
}
