package standalone

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// The authorization matrix: who may do what to which resources, over HTTP
// against the real stack. Rows are roles, resource types, interactions, and
// whether the resource is in the caller's own project or the other one.

var (
	matrixInteractions = []string{"read", "vread", "history", "search", "create", "update", "patch", "delete"}
	matrixTypes        = []string{"Patient", "Observation", "Practitioner", "Bot", "AccessPolicy", "ProjectMembership", "Project", "User"}
)

// Expected results, one per interaction in matrixInteractions order: an
// HTTP status, or for search "hit" (200, the bundle lists the resource) and
// "miss" (200 without it). A create "in the other project" is a create
// whose body names the other project in meta.project: it must land in the
// caller's own, except for the super admin's, which lands where it says (as
// in Medplum).
const (
	full          = "200 200 200 hit 201 200 200 200"
	fullOther     = "404 404 404 miss 201 404 404 404"
	readOnly      = "200 200 200 hit 403 403 403 403"
	readOnlyOther = "404 404 404 miss 403 403 403 403"
)

type cells struct{ own, other string }

// matrix lists, per role, the types it has any right to. Default deny: a
// type a role has no row for expects that role's denial in every cell (401
// for an anonymous caller, 403 for everyone else).
//
// Roles: the super admin; an admin of project A without a policy of its
// own; a practitioner of A under the clinician policy (Patient full with
// hidden and read-only fields, Observation read-only, Practitioner
// read/vread/history/search, and entries for ProjectMembership and User
// that are never granted to non-admins); a patient of A under the portal
// policy (Patient?_id=%patient.id read-only, Observation?subject=%patient
// without delete); a client application of A; a bot of A (its calls made
// by its medplum client); an anonymous caller; a member of project B.
// Bot and AccessPolicy (like ClientApplication) are written only by admins
// and by policies that name them: the client, the bot and the member of B,
// with no policy, read them and nothing more.
// "own" is the caller's project (A; B for the member of B; A for the super
// admin, who belongs to neither), "other" the other one.
var matrix = map[string]map[string]cells{
	"super admin": {
		"Patient": {full, full}, "Observation": {full, full}, "Practitioner": {full, full}, "Bot": {full, full},
		"AccessPolicy": {full, full}, "ProjectMembership": {full, full}, "Project": {full, full}, "User": {full, full},
	},
	"project admin": {
		"Patient": {full, fullOther}, "Observation": {full, fullOther}, "Practitioner": {full, fullOther},
		"Bot": {full, fullOther}, "AccessPolicy": {full, fullOther},
		"ProjectMembership": {readOnly, readOnlyOther}, "User": {readOnly, readOnlyOther},
		// Their own Project's update is refused for the field it changes;
		// another project's is not found, as its read is.
		"Project": {readOnly, "404 404 404 miss 403 404 404 403"},
	},
	"practitioner": {
		"Patient": {full, fullOther}, "Observation": {readOnly, readOnlyOther}, "Practitioner": {readOnly, readOnlyOther},
	},
	"patient": {
		"Patient":     {readOnly, readOnlyOther},
		"Observation": {"200 200 200 hit 201 200 200 403", "404 404 404 miss 201 404 404 403"},
	},
	"client": {
		"Patient": {full, fullOther}, "Observation": {full, fullOther}, "Practitioner": {full, fullOther},
		"Bot": {readOnly, readOnlyOther}, "AccessPolicy": {readOnly, readOnlyOther},
	},
	"bot": {
		"Patient": {full, fullOther}, "Observation": {full, fullOther}, "Practitioner": {full, fullOther},
		"Bot": {readOnly, readOnlyOther}, "AccessPolicy": {readOnly, readOnlyOther},
	},
	"anonymous": {},
	"member of B": {
		"Patient": {full, fullOther}, "Observation": {full, fullOther}, "Practitioner": {full, fullOther},
		"Bot": {readOnly, readOnlyOther}, "AccessPolicy": {readOnly, readOnlyOther},
	},
}

var matrixRoles = []string{"super admin", "project admin", "practitioner", "patient", "client", "bot", "anonymous", "member of B"}

// denial is what a role gets where it has no right at all.
func denial(role string) string {
	if role == "anonymous" {
		return "401"
	}
	return "403"
}

// expected is one cell's expectation.
func expected(role, typ string, i int, own bool) string {
	c, ok := matrix[role][typ]
	if !ok {
		return denial(role)
	}
	s := c.own
	if !own {
		s = c.other
	}
	return strings.Fields(s)[i]
}

// resource is a resource a cell acts on, as the super admin reads it.
type resource struct {
	typ, id, vid, project string
	body                  map[string]any
}

// accessFixture is the world the matrix runs in.
type accessFixture struct {
	prefix     string
	a, b       string // project ids
	su         string
	tokens     map[string]string // role → token (the bot has none: it runs as itself)
	clientOf   map[string]string // project → a client token, to make resources
	patientRef string            // the patient member's profile
	bystander  map[string]string // the bystander patient's profile, user and membership in A
	policies   map[string]string // name → AccessPolicy/<id> in A
	base       map[string]map[string]*resource
	botID      string
}

// snapshot reads a resource as the super admin.
func snapshot(t *testing.T, su, typ, id string) *resource {
	t.Helper()
	r := do(t, "GET", "fhir/R4/"+typ+"/"+id, su, "", nil)
	expect(t, r, 200)
	m := r.json(t)
	meta := m["meta"].(map[string]any)
	p, _ := meta["project"].(string)
	return &resource{typ: typ, id: id, vid: meta["versionId"].(string), project: p, body: m}
}

// member invites someone into a project (as the super admin) and returns
// the membership.
func member(t *testing.T, su, project string, kv ...any) map[string]any {
	t.Helper()
	r := do(t, "POST", "admin/projects/"+project+"/invite", su, "application/json", inviteBody(append([]any{"sendEmail", false}, kv...)...))
	expect(t, r, 200)
	return r.json(t)
}

func refOf(m map[string]any, field string) string {
	return m[field].(map[string]any)["reference"].(string)
}

func idOf(ref string) string { return ref[strings.LastIndex(ref, "/")+1:] }

// newBodies are what creates send, per type.
func (f *accessFixture) newBody(typ string, n int) map[string]any {
	switch typ {
	case "Patient", "Practitioner":
		return map[string]any{"resourceType": typ, "name": []any{map[string]any{"family": fmt.Sprintf("Matrix%d", n)}}}
	case "Observation":
		return map[string]any{"resourceType": typ, "status": "final", "code": map[string]any{"text": "matrix"},
			"subject": map[string]any{"reference": f.patientRef}}
	case "Bot", "AccessPolicy", "Project":
		return map[string]any{"resourceType": typ, "name": fmt.Sprintf("matrix %d", n)}
	case "ProjectMembership":
		return map[string]any{"resourceType": typ, "project": map[string]any{"reference": "Project/" + f.a},
			"user": map[string]any{"reference": "User/" + f.bystander["user"]}, "profile": map[string]any{"reference": f.bystander["profile"]}}
	case "User":
		return map[string]any{"resourceType": typ, "firstName": "Matrix", "lastName": "User", "email": fmt.Sprintf("%s-user-%d@example.com", f.prefix, n)}
	}
	panic(typ)
}

// change is the element updates and patches set, per type.
func change(typ string) (string, any) {
	switch typ {
	case "Patient", "Practitioner":
		return "active", false
	case "Observation":
		return "status", "amended"
	case "ProjectMembership":
		return "externalId", "matrix-changed"
	case "User":
		return "firstName", "Changed"
	case "AccessPolicy":
		return "name", "changed"
	case "Project":
		// Not among what a project's admins may change of their own
		// Project (TestAdminProjectSettings has those), so theirs stays a
		// refusal here.
		return "checkReferencesOnWrite", true
	}
	return "description", "changed"
}

// make creates a resource the cells may change or delete, in a project.
func (f *accessFixture) make(t *testing.T, typ, project string, n int) *resource {
	t.Helper()
	switch typ {
	case "ProjectMembership", "User":
		m := member(t, f.su, project, "resourceType", "Patient", "firstName", "Fresh", "lastName", fmt.Sprint(n),
			"email", fmt.Sprintf("%s-fresh-%d@example.com", f.prefix, n))
		if typ == "User" {
			return snapshot(t, f.su, "User", idOf(refOf(m, "user")))
		}
		return snapshot(t, f.su, "ProjectMembership", m["id"].(string))
	case "Project":
		id, _ := adminProject(t, fmt.Sprintf("matrix fresh %d", n))
		return snapshot(t, f.su, "Project", id)
	}
	body := f.newBody(typ, n)
	if typ == "Observation" && project == f.b {
		body["subject"] = map[string]any{"reference": "Patient/" + f.base[f.b]["Patient"].id}
	}
	maker := f.clientOf[project]
	if typ == "Bot" || typ == "AccessPolicy" {
		// Only admins write these: the super admin, placing it by meta.project.
		maker = f.su
		body["meta"] = map[string]any{"project": project}
	}
	r := do(t, "POST", "fhir/R4/"+typ, maker, "application/fhir+json", mustJSON(body))
	expect(t, r, 201)
	return snapshot(t, f.su, typ, r.json(t)["id"].(string))
}

// setupAccess makes two projects and the members, clients, policies, bot
// and resources the tests act with; prefix keeps e-mails apart between
// fixtures of one stack.
func setupAccess(t *testing.T, prefix string) *accessFixture {
	t.Helper()
	f := &accessFixture{prefix: prefix, tokens: map[string]string{}, clientOf: map[string]string{}, bystander: map[string]string{},
		policies: map[string]string{}, base: map[string]map[string]*resource{}}
	f.a, f.su = adminProject(t, prefix+" A")
	f.b, _ = adminProject(t, prefix+" B")
	f.tokens["super admin"] = f.su
	for _, p := range []string{f.a, f.b} {
		r := do(t, "POST", "admin/projects/"+p+"/client", f.su, "application/json", mustJSON(map[string]any{"name": "matrix client"}))
		expect(t, r, 201)
		f.clientOf[p] = clientToken(t, r.json(t)["id"].(string), r.json(t)["secret"].(string))
	}
	f.tokens["client"] = f.clientOf[f.a]

	member(t, f.su, f.a, "resourceType", "Practitioner", "firstName", "Ada", "lastName", "Admin",
		"email", prefix+"-admin@example.com", "password", "admin password", "admin", true)
	f.tokens["project admin"] = signIn(t, prefix+"-admin@example.com", "admin password", "", "openid")["access_token"].(string)
	admin := f.tokens["project admin"]

	// The admin writes the project's policies.
	policy := func(name string, resources ...any) {
		r := do(t, "POST", "fhir/R4/AccessPolicy", admin, "application/fhir+json",
			mustJSON(map[string]any{"resourceType": "AccessPolicy", "name": name, "resource": resources}))
		expect(t, r, 201)
		f.policies[name] = "AccessPolicy/" + r.json(t)["id"].(string)
	}
	policy("clinician",
		map[string]any{"resourceType": "Patient", "hiddenFields": []any{"birthDate"}, "readonlyFields": []any{"gender"}},
		map[string]any{"resourceType": "Observation", "readonly": true},
		map[string]any{"resourceType": "Practitioner", "interaction": []any{"read", "vread", "history", "search"}},
		map[string]any{"resourceType": "ProjectMembership"},
		map[string]any{"resourceType": "User"},
	)
	policy("portal",
		map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id", "readonly": true},
		map[string]any{"resourceType": "Observation", "criteria": "Observation?subject=%patient",
			"interaction": []any{"read", "vread", "history", "search", "create", "update"}},
	)

	member(t, f.su, f.a, "resourceType", "Practitioner", "firstName", "Cleo", "lastName", "Clinician",
		"email", prefix+"-clinician@example.com", "password", "clinician password",
		"membership", map[string]any{"accessPolicy": map[string]any{"reference": f.policies["clinician"]}})
	f.tokens["practitioner"] = signIn(t, prefix+"-clinician@example.com", "clinician password", "", "openid")["access_token"].(string)

	pm := member(t, f.su, f.a, "resourceType", "Patient", "firstName", "Pia", "lastName", "Patient",
		"email", prefix+"-patient@example.com", "password", "patient password",
		"membership", map[string]any{"accessPolicy": map[string]any{"reference": f.policies["portal"]}})
	f.patientRef = refOf(pm, "profile")
	f.tokens["patient"] = signIn(t, prefix+"-patient@example.com", "patient password", f.a, "openid")["access_token"].(string)

	by := member(t, f.su, f.a, "resourceType", "Patient", "firstName", "Bo", "lastName", "Bystander", "email", prefix+"-bystander@example.com")
	f.bystander = map[string]string{"profile": refOf(by, "profile"), "user": idOf(refOf(by, "user")), "membership": by["id"].(string)}

	outsider := member(t, f.su, f.b, "resourceType", "Practitioner", "firstName", "Otto", "lastName", "Outsider",
		"email", prefix+"-outsider@example.com", "password", "outsider password")
	f.tokens["member of B"] = signIn(t, prefix+"-outsider@example.com", "outsider password", "", "openid")["access_token"].(string)
	bPatient := member(t, f.su, f.b, "resourceType", "Patient", "firstName", "Bea", "lastName", "B", "email", prefix+"-b-patient@example.com")

	// The resources the cells read, and that no write may change.
	f.base[f.a] = map[string]*resource{
		"Patient":           snapshot(t, f.su, "Patient", idOf(f.patientRef)),
		"ProjectMembership": snapshot(t, f.su, "ProjectMembership", f.bystander["membership"]),
		"Project":           snapshot(t, f.su, "Project", f.a),
		"User":              snapshot(t, f.su, "User", f.bystander["user"]),
	}
	f.base[f.b] = map[string]*resource{
		"Patient":           snapshot(t, f.su, "Patient", idOf(refOf(bPatient, "profile"))),
		"ProjectMembership": snapshot(t, f.su, "ProjectMembership", outsider["id"].(string)),
		"Project":           snapshot(t, f.su, "Project", f.b),
		"User":              snapshot(t, f.su, "User", idOf(refOf(bPatient, "user"))),
	}
	for _, p := range []string{f.a, f.b} {
		for i, typ := range []string{"Observation", "Practitioner", "Bot", "AccessPolicy"} {
			f.base[p][typ] = f.make(t, typ, p, i)
		}
	}

	// The bot runs each request it is given through its medplum client.
	f.botID = newBot(t, f.su, f.a, "matrix", "", `exports.handler = async (medplum, event) => {
  const out = [];
  for (const c of event.input.cells) {
    try {
      let r;
      if (c.m === 'GET') r = await medplum.get(c.p);
      else if (c.m === 'POST') r = await medplum.post(c.p, c.b);
      else if (c.m === 'PUT') r = await medplum.put(c.p, c.b);
      else if (c.m === 'PATCH') r = await medplum.patch(c.p, c.b);
      else r = await medplum.delete(c.p);
      out.push({ ok: true, n: r && r.resourceType === 'Bundle' ? (r.entry || []).length : -1, project: r && r.meta ? r.meta.project : '' });
    } catch (e) {
      out.push({ ok: false, outcome: e.outcome });
    }
  }
  return out;
};`, "matrix.js", "timeout", 60)
	return f
}

// call is one cell's request.
type call struct {
	role, typ, interaction string
	own                    bool
	want                   string
	method, path           string
	body                   any
	target                 *resource
	other                  string // the caller's other project, which only a super admin's create may land in
}

func (c *call) name() string {
	where := "own"
	if !c.own {
		where = "other"
	}
	return c.role + " " + c.interaction + " " + c.typ + " (" + where + ")"
}

// request builds the cell's request on its target.
func (f *accessFixture) request(c *call, n int) {
	tg := c.target
	switch c.interaction {
	case "read":
		c.method, c.path = "GET", tg.typ+"/"+tg.id
	case "vread":
		c.method, c.path = "GET", tg.typ+"/"+tg.id+"/_history/"+tg.vid
	case "history":
		c.method, c.path = "GET", tg.typ+"/"+tg.id+"/_history"
	case "search":
		c.method, c.path = "GET", tg.typ+"?_id="+tg.id
	case "create":
		body := f.newBody(c.typ, n)
		if !c.own {
			body["meta"] = map[string]any{"project": c.other}
		}
		c.method, c.path, c.body = "POST", c.typ, body
	case "update":
		body := map[string]any{}
		for k, v := range tg.body {
			body[k] = v
		}
		k, v := change(tg.typ)
		body[k] = v
		c.method, c.path, c.body = "PUT", tg.typ+"/"+tg.id, body
	case "patch":
		k, v := change(tg.typ)
		c.method, c.path, c.body = "PATCH", tg.typ+"/"+tg.id, []any{map[string]any{"op": "add", "path": "/" + k, "value": v}}
	case "delete":
		c.method, c.path = "DELETE", tg.typ+"/"+tg.id
	}
}

// result is what a cell answered, in the matrix's terms.
func result(c *call, status int, entries int, project string) (string, string) {
	got := fmt.Sprint(status)
	if c.interaction == "search" && status == 200 {
		got = "miss"
		if entries > 0 {
			got = "hit"
		}
	}
	if c.interaction == "create" && status == 201 && !c.own {
		// (A new Project is its own project, whatever its body says.)
		if c.role == "super admin" && project != c.other && c.typ != "Project" {
			return got, "not created in the project meta.project names"
		}
		if c.role != "super admin" && project == c.other {
			return got, "created in the other project"
		}
	}
	return got, ""
}

func TestAccessMatrix(t *testing.T) {
	start := time.Now()
	f := setupAccess(t, "matrix")
	setup := time.Since(start)

	// Every cell, in an order that lets writes run on resources made for them:
	// a cell expected to change or delete gets a fresh resource, shared by
	// the update, patch and delete of its row, in that order. Every other
	// cell runs on the base resources, which must end unchanged.
	var calls []*call
	n := 100
	for _, role := range matrixRoles {
		own, other := f.a, f.b
		if role == "member of B" {
			own, other = f.b, f.a
		}
		for _, typ := range matrixTypes {
			for _, isOwn := range []bool{true, false} {
				project := own
				if !isOwn {
					project = other
				}
				var fresh *resource
				for i, in := range matrixInteractions {
					c := &call{role: role, typ: typ, interaction: in, own: isOwn, want: expected(role, typ, i, isOwn),
						target: f.base[project][typ], other: other}
					if (in == "update" || in == "patch" || in == "delete") && (c.want == "200") {
						if fresh == nil {
							n++
							fresh = f.make(t, typ, project, n)
						}
						c.target = fresh
					}
					n++
					f.request(c, n)
					calls = append(calls, c)
				}
			}
		}
	}

	failures := 0
	check := func(c *call, got, problem string) {
		if got != c.want || problem != "" {
			failures++
			t.Errorf("%s: got %s, want %s %s", c.name(), got, c.want, problem)
		}
	}
	var botCalls []*call
	for _, c := range calls {
		if c.role == "bot" {
			botCalls = append(botCalls, c)
			continue
		}
		var body []byte
		ct := ""
		if c.body != nil {
			body, ct = mustJSON(c.body), "application/fhir+json"
			if c.method == "PATCH" {
				ct = "application/json-patch+json"
			}
		}
		r := do(t, c.method, "fhir/R4/"+c.path, f.tokens[c.role], ct, body)
		entries, project := 0, ""
		var m map[string]any
		if json.Unmarshal(r.body, &m) == nil {
			e, _ := m["entry"].([]any)
			entries = len(e)
			if meta, ok := m["meta"].(map[string]any); ok {
				project, _ = meta["project"].(string)
			}
		}
		got, problem := result(c, r.status, entries, project)
		check(c, got, problem)
	}

	// The bot's cells, in one execution.
	in := make([]map[string]any, len(botCalls))
	for i, c := range botCalls {
		in[i] = map[string]any{"m": c.method, "p": c.path, "b": c.body}
	}
	r := do(t, "POST", "fhir/R4/Bot/"+f.botID+"/$execute", f.su, "application/json", mustJSON(map[string]any{"cells": in}))
	expect(t, r, 200)
	var outs []struct {
		OK      bool                   `json:"ok"`
		N       int                    `json:"n"`
		Project string                 `json:"project"`
		Outcome *fhir.OperationOutcome `json:"outcome"`
	}
	if err := json.Unmarshal(r.body, &outs); err != nil || len(outs) != len(botCalls) {
		t.Fatalf("bot answered %d results for %d cells (%v): %.500s", len(outs), len(botCalls), err, r.body)
	}
	for i, c := range botCalls {
		o := outs[i]
		status := 200
		switch {
		case !o.OK && o.Outcome != nil:
			status = fhir.StatusOf(o.Outcome)
		case !o.OK:
			status = 500
		case c.interaction == "create":
			status = 201
		}
		got, problem := result(c, status, o.N, o.Project)
		check(c, got, problem)
	}

	// No denied write touched anything: every base resource is as it was.
	for _, p := range []string{f.a, f.b} {
		for typ, res := range f.base[p] {
			r := do(t, "GET", "fhir/R4/"+typ+"/"+res.id, f.su, "", nil)
			if r.status != 200 {
				t.Errorf("%s/%s: %d after the matrix", typ, res.id, r.status)
			} else if v := r.json(t)["meta"].(map[string]any)["versionId"]; v != res.vid {
				t.Errorf("%s/%s changed from version %s to %s", typ, res.id, res.vid, v)
			}
		}
	}
	total := len(matrixRoles) * len(matrixTypes) * len(matrixInteractions) * 2
	if len(calls) != total {
		t.Fatalf("%d cells run, want %d", len(calls), total)
	}
	t.Logf("authorization matrix: %d cells (%d roles × %d types × %d interactions × own/other), %d failed; setup %s, total %s",
		total, len(matrixRoles), len(matrixTypes), len(matrixInteractions), failures, setup.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// bundleOf reads a search answer: its total and its resources.
func bundleOf(t *testing.T, r *response) (int, []map[string]any) {
	t.Helper()
	expect(t, r, 200)
	b := r.json(t)
	total := -1
	if n, ok := b["total"].(float64); ok {
		total = int(n)
	}
	var out []map[string]any
	entries, _ := b["entry"].([]any)
	for _, e := range entries {
		out = append(out, e.(map[string]any)["resource"].(map[string]any))
	}
	return total, out
}

// TestAccessCriteria covers what the matrix does not: resources of the
// caller's own project outside its policy's criteria, writes checked
// before and after, hidden and read-only fields, a user's own User, two
// access[] entries of one policy, and bots under a policy.
func TestAccessCriteria(t *testing.T) {
	f := setupAccess(t, "criteria")
	patient, clinician, admin, client := f.tokens["patient"], f.tokens["practitioner"], f.tokens["project admin"], f.clientOf[f.a]
	obs := func(subject string) map[string]any {
		return map[string]any{"resourceType": "Observation", "status": "final", "code": map[string]any{"text": "criteria"},
			"subject": map[string]any{"reference": subject}}
	}
	create := func(token string, res map[string]any) map[string]any {
		t.Helper()
		r := do(t, "POST", "fhir/R4/"+res["resourceType"].(string), token, "application/fhir+json", mustJSON(res))
		expect(t, r, 201)
		return r.json(t)
	}
	version := func(typ, id string) string {
		t.Helper()
		return snapshot(t, f.su, typ, id).vid
	}
	mine := []map[string]any{create(client, obs(f.patientRef)), create(client, obs(f.patientRef))}
	theirs := create(client, obs(f.bystander["profile"]))
	theirsID := theirs["id"].(string)

	t.Run("reads and searches stop at the criteria", func(t *testing.T) {
		expect(t, do(t, "GET", "fhir/R4/"+f.bystander["profile"], patient, "", nil), 404)
		expect(t, do(t, "GET", "fhir/R4/Observation/"+theirsID, patient, "", nil), 404)
		expect(t, do(t, "GET", "fhir/R4/Observation/"+theirsID+"/_history", patient, "", nil), 404)
		expect(t, do(t, "GET", "fhir/R4/Observation/"+theirsID+"/_history/"+theirs["meta"].(map[string]any)["versionId"].(string), patient, "", nil), 404)
		expect(t, do(t, "GET", "fhir/R4/Observation/"+mine[0]["id"].(string), patient, "", nil), 200)

		total, res := bundleOf(t, do(t, "GET", "fhir/R4/Patient?_total=accurate", patient, "", nil))
		if total != 1 || len(res) != 1 || "Patient/"+res[0]["id"].(string) != f.patientRef {
			t.Fatalf("patients seen: %d %v", total, res)
		}
		// The criteria are in the query: totals and pages count only what the caller sees.
		want, _ := bundleOf(t, do(t, "GET", "fhir/R4/Observation?_summary=count&subject="+f.patientRef, f.su, "", nil))
		total, res = bundleOf(t, do(t, "GET", "fhir/R4/Observation?_total=accurate&_count=1", patient, "", nil))
		if total != want || len(res) != 1 || want < 3 {
			t.Fatalf("observations: total %d of %d, page %d", total, want, len(res))
		}
		seen := 0
		for next := "fhir/R4/Observation?_count=1"; next != ""; {
			r := do(t, "GET", next, patient, "", nil)
			_, page := bundleOf(t, r)
			for _, o := range page {
				if o["subject"].(map[string]any)["reference"] != f.patientRef {
					t.Fatalf("another patient's observation: %v", o)
				}
			}
			seen += len(page)
			next = ""
			for _, l := range r.json(t)["link"].([]any) {
				if l.(map[string]any)["relation"] == "next" {
					u := l.(map[string]any)["url"].(string)
					next = u[strings.Index(u, "fhir/R4/"):]
				}
			}
		}
		if seen != want {
			t.Fatalf("paged through %d observations, want %d", seen, want)
		}
		if total, _ := bundleOf(t, do(t, "GET", "fhir/R4/Observation?_total=accurate&subject="+f.bystander["profile"], patient, "", nil)); total != 0 {
			t.Fatalf("searched another patient's observations: %d", total)
		}
	})

	t.Run("writes are checked before and after", func(t *testing.T) {
		before, _ := bundleOf(t, do(t, "GET", "fhir/R4/Observation?_summary=count", f.su, "", nil))
		expect(t, do(t, "POST", "fhir/R4/Observation", patient, "application/fhir+json", mustJSON(obs(f.bystander["profile"]))), 403)
		expect(t, do(t, "POST", "fhir/R4/Observation", patient, "application/fhir+json", mustJSON(obs(f.bystander["profile"])),
			"If-None-Exist", "code:text=nothing-like-this"), 403)
		moved := mine[0]
		id, v := moved["id"].(string), version("Observation", moved["id"].(string))
		moved["subject"] = map[string]any{"reference": f.bystander["profile"]}
		expect(t, do(t, "PUT", "fhir/R4/Observation/"+id, patient, "application/fhir+json", mustJSON(moved)), 403)
		expect(t, do(t, "PATCH", "fhir/R4/Observation/"+id, patient, "application/json-patch+json",
			mustJSON([]any{map[string]any{"op": "replace", "path": "/subject/reference", "value": f.bystander["profile"]}})), 403)
		theirs["subject"] = map[string]any{"reference": f.patientRef}
		expect(t, do(t, "PUT", "fhir/R4/Observation/"+theirsID, patient, "application/fhir+json", mustJSON(theirs)), 404)
		// Conditional update: another patient's observation is not found, so
		// the PUT creates, and the new content must meet the criteria too.
		expect(t, do(t, "PUT", "fhir/R4/Observation?_id="+theirsID, patient, "application/fhir+json", mustJSON(obs(f.bystander["profile"]))), 403)
		// A batch runs each entry under the same policy.
		batch := map[string]any{"resourceType": "Bundle", "type": "batch", "entry": []any{
			map[string]any{"request": map[string]any{"method": "GET", "url": "Observation/" + theirsID}},
			map[string]any{"resource": obs(f.bystander["profile"]), "request": map[string]any{"method": "POST", "url": "Observation"}},
			map[string]any{"request": map[string]any{"method": "DELETE", "url": "Observation/" + id}},
			map[string]any{"request": map[string]any{"method": "GET", "url": f.patientRef}},
		}}
		r := do(t, "POST", "fhir/R4", patient, "application/fhir+json", mustJSON(batch))
		expect(t, r, 200)
		for i, want := range []string{"404 Not Found", "403 Forbidden", "403 Forbidden", "200 OK"} {
			if got := r.json(t)["entry"].([]any)[i].(map[string]any)["response"].(map[string]any)["status"]; got != want {
				t.Errorf("batch entry %d: %v, want %s", i, got, want)
			}
		}
		if after, _ := bundleOf(t, do(t, "GET", "fhir/R4/Observation?_summary=count", f.su, "", nil)); after != before {
			t.Errorf("refused writes created %d observations", after-before)
		}
		if version("Observation", id) != v || version("Observation", theirsID) != theirs["meta"].(map[string]any)["versionId"] {
			t.Error("a refused write changed an observation")
		}
		// Within the criteria, the same writes succeed.
		mine[1]["status"] = "amended"
		expect(t, do(t, "PUT", "fhir/R4/Observation/"+mine[1]["id"].(string), patient, "application/fhir+json", mustJSON(mine[1])), 200)
		expect(t, do(t, "POST", "fhir/R4/Observation", patient, "application/fhir+json", mustJSON(obs(f.patientRef))), 201)
	})

	t.Run("hidden and read-only fields", func(t *testing.T) {
		p := create(client, map[string]any{"resourceType": "Patient", "gender": "female", "birthDate": "1970-01-02",
			"name": []any{map[string]any{"family": "Hidden"}}})
		id := p["id"].(string)
		r := do(t, "GET", "fhir/R4/Patient/"+id, clinician, "", nil)
		expect(t, r, 200)
		seen := r.json(t)
		if seen["birthDate"] != nil || seen["gender"] != "female" {
			t.Fatalf("clinician sees: %s", r.body)
		}
		if _, res := bundleOf(t, do(t, "GET", "fhir/R4/Patient?_id="+id, clinician, "", nil)); len(res) != 1 || res[0]["birthDate"] != nil {
			t.Fatalf("search shows the hidden field: %v", res)
		}
		// A write of what the caller saw keeps the hidden field.
		seen["active"] = true
		r = do(t, "PUT", "fhir/R4/Patient/"+id, clinician, "application/fhir+json", mustJSON(seen))
		expect(t, r, 200)
		if r.json(t)["birthDate"] != nil || r.json(t)["active"] != true {
			t.Fatalf("update answer: %s", r.body)
		}
		_, hist := bundleOf(t, do(t, "GET", "fhir/R4/Patient/"+id+"/_history", clinician, "", nil))
		for _, v := range hist {
			if v["birthDate"] != nil {
				t.Fatalf("history shows the hidden field: %v", v)
			}
		}
		// A patch can neither test nor change it.
		expect(t, do(t, "PATCH", "fhir/R4/Patient/"+id, clinician, "application/json-patch+json",
			[]byte(`[{"op":"test","path":"/birthDate","value":"1970-01-02"}]`)), 400)
		expect(t, do(t, "PATCH", "fhir/R4/Patient/"+id, clinician, "application/json-patch+json",
			[]byte(`[{"op":"add","path":"/birthDate","value":"2001-01-01"}]`)), 200)
		if got := snapshot(t, f.su, "Patient", id).body["birthDate"]; got != "1970-01-02" {
			t.Fatalf("stored birthDate %v", got)
		}
		// A read-only field: a change is refused with 400 naming it.
		seen["gender"] = "male"
		r = do(t, "PUT", "fhir/R4/Patient/"+id, clinician, "application/fhir+json", mustJSON(seen))
		expect(t, r, 400)
		issue := r.json(t)["issue"].([]any)[0].(map[string]any)
		if issue["expression"].([]any)[0] != "gender" || !strings.Contains(r.outcomeText(t), "Medplum") {
			t.Fatalf("read-only answer: %s", r.body)
		}
		expect(t, do(t, "PATCH", "fhir/R4/Patient/"+id, clinician, "application/json-patch+json",
			[]byte(`[{"op":"remove","path":"/gender"}]`)), 400)
		if got := snapshot(t, f.su, "Patient", id).body["gender"]; got != "female" {
			t.Fatalf("stored gender %v", got)
		}
	})

	t.Run("a user's own User", func(t *testing.T) {
		me := do(t, "GET", "auth/me", patient, "", nil)
		expect(t, me, 200)
		uid := me.json(t)["user"].(map[string]any)["id"].(string)
		r := do(t, "GET", "fhir/R4/User/"+uid, patient, "", nil)
		expect(t, r, 200)
		u := r.json(t)
		u["firstName"] = "Renamed"
		expect(t, do(t, "PUT", "fhir/R4/User/"+uid, patient, "application/fhir+json", mustJSON(u)), 200)
		u["email"] = "elsewhere@example.com"
		r = do(t, "PUT", "fhir/R4/User/"+uid, patient, "application/fhir+json", mustJSON(u))
		expect(t, r, 400)
		if !strings.Contains(r.outcomeText(t), "email") {
			t.Fatal(string(r.body))
		}
		expect(t, do(t, "DELETE", "fhir/R4/User/"+uid, patient, "", nil), 403)
		expect(t, do(t, "GET", "fhir/R4/User/"+f.bystander["user"], patient, "", nil), 403)
		expect(t, do(t, "GET", "fhir/R4/User", patient, "", nil), 403)
		// An admin reads the project's users but changes only its own.
		r = do(t, "GET", "fhir/R4/User/"+f.bystander["user"], admin, "", nil)
		expect(t, r, 200)
		expect(t, do(t, "PUT", "fhir/R4/User/"+f.bystander["user"], admin, "application/fhir+json", r.body), 403)
	})

	t.Run("two access entries of one policy", func(t *testing.T) {
		param := func(ref string) map[string]any {
			return map[string]any{"policy": map[string]any{"reference": f.policies["portal"]},
				"parameter": []any{map[string]any{"name": "patient", "valueReference": map[string]any{"reference": ref}}}}
		}
		member(t, f.su, f.a, "resourceType", "Practitioner", "firstName", "Cary", "lastName", "Giver",
			"email", f.prefix+"-caregiver@example.com", "password", "caregiver password",
			"membership", map[string]any{"access": []any{param(f.patientRef), param(f.bystander["profile"])}})
		carer := signIn(t, f.prefix+"-caregiver@example.com", "caregiver password", "", "openid")["access_token"].(string)
		third := create(client, map[string]any{"resourceType": "Patient"})["id"].(string)
		expect(t, do(t, "GET", "fhir/R4/"+f.patientRef, carer, "", nil), 200)
		expect(t, do(t, "GET", "fhir/R4/"+f.bystander["profile"], carer, "", nil), 200)
		expect(t, do(t, "GET", "fhir/R4/Patient/"+third, carer, "", nil), 404)
		if total, _ := bundleOf(t, do(t, "GET", "fhir/R4/Patient?_total=accurate", carer, "", nil)); total != 2 {
			t.Fatalf("caregiver sees %d patients, want 2", total)
		}
		expect(t, do(t, "GET", "fhir/R4/Observation/"+theirsID, carer, "", nil), 200)
	})

	t.Run("bots", func(t *testing.T) {
		// The clinician's policy names no Bot: it cannot run one.
		expect(t, do(t, "POST", "fhir/R4/Bot/"+f.botID+"/$execute", clinician, "application/json", []byte(`{"cells":[]}`)), 403)
		expect(t, do(t, "POST", "fhir/R4/Bot/"+f.botID+"/$execute", patient, "application/json", []byte(`{"cells":[]}`)), 403)
		// A bot under the clinician policy: Observations read-only.
		id := newBot(t, f.su, f.a, "clinician bot", "", `exports.handler = async (medplum, event) => {
  const found = await medplum.searchResources('Observation', '_count=1');
  try {
    await medplum.createResource({resourceType: 'Observation', status: 'final', code: {text: 'bot'}});
    return 'created';
  } catch (e) {
    return 'read ' + found.length + ', create ' + e.outcome.id;
  }
};`, "clinician.js", "accessPolicy", map[string]any{"reference": f.policies["clinician"]})
		r := do(t, "POST", "fhir/R4/Bot/"+id+"/$execute", client, "text/plain", []byte("x"))
		expect(t, r, 200)
		if string(r.body) != "read 1, create forbidden" {
			t.Fatalf("bot under a policy: %s", r.body)
		}
	})
}

// An access policy whose criteria could never work is refused when it is
// written, naming the entry, rather than failing each request later.
func TestAccessPolicyCriteriaChecked(t *testing.T) {
	_, su := adminProject(t, "Policy criteria")
	for criteria, text := range map[string]string{
		"Observation?status=final": "Criteria must search Patient, the entry's resource type, not Observation",
		"Patient?colour=blue":      "Unknown search parameter in criteria: colour",
		"?name=x":                  "Invalid criteria: criteria \"?name=x\": no resource type",
		"Patient?%zz=1":            "",
	} {
		body := mustJSON(map[string]any{"resourceType": "AccessPolicy", "name": "p",
			"resource": []any{map[string]any{"resourceType": "Observation"}, map[string]any{"resourceType": "Patient", "criteria": criteria}}})
		r := do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", body)
		expect(t, r, 400)
		if text != "" {
			expectOutcome(t, r, 400, text, "AccessPolicy.resource[1].criteria")
		}
	}
	// Variables stay for the membership's parameters to give.
	r := do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{"resourceType": "AccessPolicy", "name": "ok",
		"resource": []any{map[string]any{"resourceType": "Observation", "criteria": "Observation?subject=%patient&status=final"}}}))
	expect(t, r, 201)
}
