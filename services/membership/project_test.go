package membership

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
)

func TestCreateProjectRefusals(t *testing.T) {
	serverUser := fixtureUser(t, "", "server-"+uuid.NewString()[:8]+"@example.com")
	other := fixtureProject(t, nil)
	scopedUser := fixtureUser(t, other, "scoped@example.com")
	cases := []struct {
		name        string
		by          *bus.Principal
		contentType string
		body        string // %s is the project's name
		status      int
		text, expr  string
	}{
		{"anonymous", nil, "application/fhir+json", `{"resourceType":"Project","name":"%s"}`, 401, "Unauthorized", ""},
		{"a project's admin", adminOf(other), "application/fhir+json", `{"resourceType":"Project","name":"%s"}`, 403, "Forbidden", ""},
		{"not JSON", superAdmin(), "text/plain", `{"resourceType":"Project","name":"%s"}`, 415, "Unsupported media type", ""},
		{"bad JSON", superAdmin(), "application/json", `{"resourceType":"Project","name":"%s"`, 400, "Content could not be parsed", ""},
		{"another resource type", superAdmin(), "application/fhir+json", `{"resourceType":"Patient","name":"%s"}`, 400, "Incorrect resource type", "resourceType"},
		{"no resource type", superAdmin(), "application/fhir+json", `{"name":"%s"}`, 400, "Incorrect resource type", "resourceType"},
		{"blank name", superAdmin(), "application/fhir+json", `{"resourceType":"Project","name":"  ","description":"%s"}`, 400, "Project name is required", "name"},
		{"name not text", superAdmin(), "application/fhir+json", `{"resourceType":"Project","name":["%s"]}`, 400, "Project name is required", "name"},
		{"owner as text", superAdmin(), "application/fhir+json", `{"resourceType":"Project","name":"%s","owner":"User/` + serverUser + `"}`, 400, "Invalid owner", "owner"},
		{"owner null", superAdmin(), "application/fhir+json", `{"resourceType":"Project","name":"%s","owner":null}`, 400, "Invalid owner", "owner"},
		{"owner a patient", superAdmin(), "application/fhir+json", `{"resourceType":"Project","name":"%s","owner":{"reference":"Patient/` + serverUser + `"}}`,
			400, "Only Users are permitted to be the owner of a new Project", "owner"},
		{"owner without a reference", superAdmin(), "application/fhir+json", `{"resourceType":"Project","name":"%s","owner":{"display":"Ada"}}`,
			400, "Only Users are permitted to be the owner of a new Project", "owner"},
		{"owner unknown", superAdmin(), "application/fhir+json", `{"resourceType":"Project","name":"%s","owner":{"reference":"User/` + uuid.NewString() + `"}}`,
			400, "Owner not found", "owner"},
		{"owner of another project", superAdmin(), "application/fhir+json", `{"resourceType":"Project","name":"%s","owner":{"reference":"User/` + scopedUser + `"}}`,
			400, "Project owner must not belong to another Project", "owner"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "Refused " + uuid.NewString()
			resp, err := call(t, stack.svc.createProject, request(tc.by, nil, tc.contentType, strings.Replace(tc.body, "%s", name, 1)))
			wantFHIRError(t, resp, err, tc.status, tc.text, tc.expr)
			// Every refusal comes before the first write.
			if n := projectsNamed(t, name); n != 0 {
				t.Errorf("%d projects named %q after a refusal", n, name)
			}
			if ms := membersOf(t, other); len(ms) != 0 {
				t.Errorf("memberships in the other project: %v", ms)
			}
		})
	}
}

func TestCreateProject(t *testing.T) {
	t.Run("strict mode unless said otherwise, id and meta the server's", func(t *testing.T) {
		name := "Clinic " + uuid.NewString()
		resp, err := call(t, stack.svc.createProject, fhirJSON(superAdmin(), nil,
			`{"resourceType":"Project","id":"chosen","meta":{"versionId":"7","project":"elsewhere","source":"client"},"name":"`+name+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		p := decode(t, string(resp.Body))
		id, _ := p["id"].(string)
		if resp.Status != 201 || id == "chosen" || uuid.Validate(id) != nil {
			t.Fatalf("answer %d, id %q", resp.Status, id)
		}
		if got, want := resp.Header["Location"], testBaseURL+"fhir/R4/Project/"+id; got != want {
			t.Errorf("Location %q, want %q", got, want)
		}
		if p["strictMode"] != true || p["name"] != name {
			t.Errorf("project %v", p)
		}
		meta := p["meta"].(map[string]any)
		if meta["project"] != id || meta["versionId"] == "7" || meta["source"] != nil || meta["author"].(map[string]any)["reference"] != "Practitioner/super" {
			t.Errorf("meta %v: want the project its own, the super admin its author", meta)
		}
		if stored := readDoc(t, "Project", id); stored["strictMode"] != true || projectsNamed(t, name) != 1 {
			t.Errorf("stored %v", stored)
		}
		if ms := membersOf(t, id); len(ms) != 0 {
			t.Errorf("a project with no owner has members: %v", ms)
		}
	})

	t.Run("strict mode off is kept", func(t *testing.T) {
		p := mustCall(t, stack.svc.createProject, fhirJSON(superAdmin(), nil, `{"resourceType":"Project","name":"Lax","strictMode":false}`), 201)
		if p["strictMode"] != false {
			t.Errorf("strictMode %v, want false", p["strictMode"])
		}
	})

	t.Run("the owner becomes its admin", func(t *testing.T) {
		email := "owner-" + uuid.NewString()[:8] + "@example.com"
		owner := fixtureUser(t, "", email)
		name := "Owned " + uuid.NewString()
		p := mustCall(t, stack.svc.createProject, fhirJSON(superAdmin(), nil,
			`{"resourceType":"Project","name":"`+name+`","owner":{"reference":"User/`+owner+`"}}`), 201)
		id := p["id"].(string)
		if ref, _ := refOf(p["owner"]); ref != "User/"+owner {
			t.Errorf("owner %v", p["owner"])
		}
		ms := membersOf(t, id)
		if len(ms) != 1 || len(ms["User/"+owner]) != 1 {
			t.Fatalf("memberships %v, want one of the owner", ms)
		}
		m := ms["User/"+owner][0]
		profile, _ := refOf(m["profile"])
		if m["admin"] != true || !strings.HasPrefix(profile, "Practitioner/") {
			t.Errorf("membership %v", m)
		}
		if got, _ := json.Marshal(m["project"]); string(got) != `{"display":"`+name+`","reference":"Project/`+id+`"}` {
			t.Errorf("project %s", got)
		}
		if by, _ := refOf(m["invitedBy"]); by != "User/super" {
			t.Errorf("invitedBy %v", m["invitedBy"])
		}
		prof := readDoc(t, "Practitioner", strings.TrimPrefix(profile, "Practitioner/"))
		delete(prof, "meta")
		delete(prof, "id")
		want := `{"name":[{"family":"Lovelace","given":["Ada"]}],"resourceType":"Practitioner","telecom":[{"system":"email","use":"work","value":"` + email + `"}]}`
		if got, _ := json.Marshal(prof); string(got) != want {
			t.Errorf("profile %s\nwant %s", got, want)
		}
		// Answered once the owner's tokens carry the membership.
		e := sessionEntry(t, m["id"].(string))
		if e == nil || !e.Admin || !e.Active || e.Project != id || e.User != "User/"+owner || e.Profile != profile {
			t.Errorf("session entry %+v", e)
		}
	})
}

func TestGetProject(t *testing.T) {
	id := fixtureProject(t, map[string]any{
		"name": "Readable", "description": "not shown", "owner": map[string]any{"reference": "User/o"},
		"secret":   []any{map[string]any{"name": "k", "valueString": "v"}},
		"site":     []any{map[string]any{"name": "s", "domain": []any{"s.example"}}},
		"features": []any{"bots"},
	})
	want := `{"project":{"id":"` + id + `","name":"Readable","owner":{"reference":"User/o"},"features":["bots"],` +
		`"secret":[{"name":"k","valueString":"v"}],"site":[{"domain":["s.example"],"name":"s"}]}}`
	for _, by := range []*bus.Principal{adminOf(id), superAdmin()} {
		resp, err := call(t, stack.svc.getProject, request(by, map[string]string{"projectId": id}, "", ""))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != 200 || string(resp.Body) != want {
			t.Errorf("%s: %d %s\nwant %s", by.User, resp.Status, resp.Body, want)
		}
	}

	bare := fixtureProject(t, map[string]any{"name": "Bare"})
	resp, err := call(t, stack.svc.getProject, request(adminOf(bare), map[string]string{"projectId": bare}, "", ""))
	if err != nil || string(resp.Body) != `{"project":{"id":"`+bare+`","name":"Bare"}}` {
		t.Errorf("a project without extras: %v %s", err, resp.Body)
	}

	missing := uuid.NewString()
	for _, tc := range []struct {
		name    string
		by      *bus.Principal
		project string
		status  int
		text    string
	}{
		{"anonymous", nil, id, 401, "Unauthorized"},
		{"a member, not an admin", memberOf(id), id, 403, "Forbidden"},
		{"another project's admin", adminOf(bare), id, 403, "Forbidden"},
		{"no such project", adminOf(missing), missing, 404, "Not found"},
		{"no such project, for a super admin", superAdmin(), missing, 404, "Not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := call(t, stack.svc.getProject, request(tc.by, map[string]string{"projectId": tc.project}, "", ""))
			wantFHIRError(t, resp, err, tc.status, tc.text, "")
		})
	}
}

// A project's owner is a member like an invited one: inviting them again
// is refused, not a second membership.
func TestOwnerIsTheMember(t *testing.T) {
	email := invitee("owner-again")
	owner := fixtureUser(t, "", email)
	p := mustCall(t, stack.svc.createProject, fhirJSON(superAdmin(), nil,
		`{"resourceType":"Project","name":"Owned twice","owner":{"reference":"User/`+owner+`"}}`), 201)
	id := p["id"].(string)
	ms := membersOf(t, id)["User/"+owner]
	if len(ms) != 1 {
		t.Fatalf("%d memberships of the owner", len(ms))
	}
	if held, _ := stack.repo.ClaimOwner(testCtx(t), repo.MembershipKey(id, "User/"+owner)); held != ms[0]["id"] {
		t.Errorf("membership claim held by %q, want the owner's membership %v", held, ms[0]["id"])
	}
	stack.steps.script(email, stepScript{UserID: owner})
	resp, err := call(t, stack.svc.invite, fhirJSON(adminOf(id), map[string]string{"projectId": id}, inviteJSON(t, email, map[string]any{"sendEmail": false})))
	wantFHIRError(t, resp, err, 409, "User is already a member of this project", "")
	if ms := membersOf(t, id)["User/"+owner]; len(ms) != 1 {
		t.Errorf("%d memberships of the owner after the invite", len(ms))
	}
}
