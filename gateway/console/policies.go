package console

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
)

// policyForm is an AccessPolicy as the editor shows it: one row per
// resource entry, and blank rows to add more.
type policyForm struct {
	ID, Name string
	Rows     []policyRow
}

type policyRow struct {
	Type, Criteria, Hidden, ReadOnlyFields string
	ReadOnly                               bool
}

// blankRows is how many empty rows the editor offers for new entries.
const blankRows = 3

func policyFormOf(res map[string]any) *policyForm {
	f := &policyForm{}
	f.ID, _ = res["id"].(string)
	f.Name, _ = res["name"].(string)
	list, _ := res["resource"].([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		r := policyRow{}
		r.Type, _ = m["resourceType"].(string)
		r.Criteria, _ = m["criteria"].(string)
		r.ReadOnly, _ = m["readonly"].(bool)
		r.Hidden = joinStrings(m["hiddenFields"])
		r.ReadOnlyFields = joinStrings(m["readonlyFields"])
		f.Rows = append(f.Rows, r)
	}
	return f
}

func joinStrings(v any) string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return strings.Join(out, ", ")
}

func splitList(s string) []any {
	var out []any
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func (c *Console) listPolicies(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	pols, err := c.policies(fc, s)
	if err != nil {
		return err
	}
	return c.render(fc, 200, "policies", page{Title: "Access policies", CSRF: s.csrf(), Project: &project{}, Policies: pols, Notice: policyNotices[fc.Query("done")]})
}

var policyNotices = map[string]string{"saved": "The access policy was saved."}

func (c *Console) newPolicy(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	return c.renderPolicy(fc, s, 200, &policyForm{}, nil, "")
}

func (c *Console) renderPolicy(fc *fiber.Ctx, s *session, status int, f *policyForm, errs map[string]string, problem string) error {
	for range blankRows {
		f.Rows = append(f.Rows, policyRow{})
	}
	title := f.Name
	if f.ID == "" {
		title = "New access policy"
	}
	return c.render(fc, status, "policy", page{Title: title, CSRF: s.csrf(), Project: &project{}, Policy: f, Errors: errs, Problem: problem})
}

// readPolicy reads an AccessPolicy through the API.
func (c *Console) readPolicy(fc *fiber.Ctx, s *session, id string) (map[string]any, *bus.Response, error) {
	resp, err := c.read(fc, s, "AccessPolicy", id)
	if err != nil || resp.Status != 200 {
		return nil, resp, err
	}
	res, err := fhir.Decode(resp.Body)
	return res, resp, err
}

func (c *Console) showPolicy(fc *fiber.Ctx) error {
	s, err := c.signedIn(fc)
	if s == nil {
		return err
	}
	res, resp, err := c.readPolicy(fc, s, fc.Params("id"))
	if err != nil {
		return err
	}
	if res == nil {
		return c.message(fc, resp.Status, "Access policy", failure(resp))
	}
	return c.renderPolicy(fc, s, 200, policyFormOf(res), nil, "")
}

// entryField finds the entry and field an AccessPolicy refusal names.
var entryField = regexp.MustCompile(`^AccessPolicy\.resource\[(\d+)\]\.(\w+)`)

// savePolicy creates or replaces the policy's name and entries through
// the API, keeping its other fields (IP rules, compartment).
func (c *Console) savePolicy(fc *fiber.Ctx) error {
	s, err := c.form(fc)
	if s == nil {
		return err
	}
	id := fc.Params("id")
	res := map[string]any{"resourceType": "AccessPolicy"}
	if id != "" {
		cur, resp, err := c.readPolicy(fc, s, id)
		if err != nil {
			return err
		}
		if cur == nil {
			return c.message(fc, resp.Status, "Access policy", failure(resp))
		}
		res = cur
	}
	args := fc.Request().PostArgs()
	values := func(name string) []string {
		var out []string
		for _, v := range args.PeekMulti(name) {
			out = append(out, string(v))
		}
		return out
	}
	types, crits, ros, hidden, roFields := values("type"), values("criteria"), values("readonly"), values("hidden"), values("readonlyFields")
	at := func(list []string, i int) string {
		if i < len(list) {
			return strings.TrimSpace(list[i])
		}
		return ""
	}
	form := &policyForm{ID: id, Name: strings.TrimSpace(fc.FormValue("name"))}
	var entries []any
	var rowOf []int // the form row of each entry sent
	for i := range types {
		row := policyRow{Type: at(types, i), Criteria: at(crits, i), ReadOnly: at(ros, i) == "true", Hidden: at(hidden, i), ReadOnlyFields: at(roFields, i)}
		if row.Type == "" {
			continue
		}
		form.Rows = append(form.Rows, row)
		e := map[string]any{"resourceType": row.Type}
		if row.Criteria != "" {
			e["criteria"] = row.Criteria
		}
		if row.ReadOnly {
			e["readonly"] = true
		}
		if l := splitList(row.Hidden); len(l) > 0 {
			e["hiddenFields"] = l
		}
		if l := splitList(row.ReadOnlyFields); len(l) > 0 {
			e["readonlyFields"] = l
		}
		entries = append(entries, e)
		rowOf = append(rowOf, len(form.Rows)-1)
	}
	res["name"] = form.Name
	if len(entries) > 0 {
		res["resource"] = entries
	} else {
		delete(res, "resource")
	}
	raw, _ := json.Marshal(res)
	var resp *bus.Response
	if id == "" {
		resp, err = c.call(fc, s.who, "POST", "/fhir/R4/AccessPolicy", map[string]string{"type": "AccessPolicy"}, nil, "application/fhir+json", raw)
	} else {
		resp, err = c.call(fc, s.who, "PUT", "/fhir/R4/AccessPolicy/"+id, map[string]string{"type": "AccessPolicy", "id": id}, nil, "application/fhir+json", raw)
	}
	if err != nil {
		return err
	}
	if resp.Status != 200 && resp.Status != 201 {
		errs, problem := policyErrors(resp, rowOf)
		// Only the rows sent are shown again, in the order they were sent.
		return c.renderPolicy(fc, s, resp.Status, form, errs, problem)
	}
	headers(fc)
	return fc.Redirect(c.cfg.BaseURL+"console/policies?done=saved", fiber.StatusSeeOther)
}

// policyErrors places an AccessPolicy refusal's issues beside the form's
// fields: the name, or an entry's resource type or criteria.
func policyErrors(resp *bus.Response, rowOf []int) (map[string]string, string) {
	var o fhir.OperationOutcome
	if json.Unmarshal(resp.Body, &o) != nil || len(o.Issue) == 0 {
		return nil, failure(resp)
	}
	errs, rest := map[string]string{}, []string{}
	for _, is := range o.Issue {
		placed := false
		for _, e := range is.Expression {
			if e == "AccessPolicy.name" {
				errs["name"], placed = is.Details.Text, true
			}
			if m := entryField.FindStringSubmatch(e); m != nil {
				n, _ := strconv.Atoi(m[1])
				field := map[string]string{"resourceType": "type", "criteria": "criteria"}[m[2]]
				if n < len(rowOf) && field != "" {
					errs[fmt.Sprintf("%s_%d", field, rowOf[n])], placed = is.Details.Text, true
				}
			}
		}
		if !placed {
			rest = append(rest, is.Details.Text)
		}
	}
	return errs, strings.Join(rest, " ")
}
