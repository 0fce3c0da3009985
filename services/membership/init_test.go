package membership

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/invite"
)

func TestInitParams(t *testing.T) {
	cases := []struct {
		name       string
		body       string
		project    string // as JSON
		ownerEmail string
		text, expr string
	}{
		{"name only", `{"resourceType":"Parameters","parameter":[{"name":"name","valueString":"Clinic"}]}`,
			`{"name":"Clinic","resourceType":"Project"}`, "", "", ""},
		{"no parameters", `{"resourceType":"Parameters"}`, `{"resourceType":"Project"}`, "", "", ""},
		{"owner e-mail normalised", `{"resourceType":"Parameters","parameter":[{"name":"name","valueString":"Clinic"},{"name":"ownerEmail","valueString":"  Owner@Example.COM "}]}`,
			`{"name":"Clinic","resourceType":"Project"}`, "owner@example.com", "", ""},
		{"owner reference", `{"resourceType":"Parameters","parameter":[{"name":"owner","valueReference":{"reference":"User/u-1","display":"Ada"}}]}`,
			`{"owner":{"reference":"User/u-1"},"resourceType":"Project"}`, "", "", ""},
		{"owner without a reference is ignored", `{"resourceType":"Parameters","parameter":[{"name":"owner","valueString":"User/u-1"}]}`,
			`{"resourceType":"Project"}`, "", "", ""},
		{"blank owner e-mail is none", `{"resourceType":"Parameters","parameter":[{"name":"owner","valueReference":{"reference":"User/u-1"}},{"name":"ownerEmail","valueString":"  "}]}`,
			`{"owner":{"reference":"User/u-1"},"resourceType":"Project"}`, "", "", ""},
		{"last name wins", `{"resourceType":"Parameters","parameter":[{"name":"name","valueString":"A"},{"name":"name","valueString":"B"}]}`,
			`{"name":"B","resourceType":"Project"}`, "", "", ""},

		{"owner and owner e-mail", `{"resourceType":"Parameters","parameter":[{"name":"ownerEmail","valueString":"o@example.com"},{"name":"owner","valueReference":{"reference":"User/u-1"}}]}`,
			"", "", "Give owner or ownerEmail, not both", "parameter"},
		{"unknown parameter", `{"resourceType":"Parameters","parameter":[{"name":"name","valueString":"x"},{"name":"strict","valueString":"x"}]}`,
			"", "", "Unknown parameter: strict", "parameter"},
		{"unknown before both owners", `{"resourceType":"Parameters","parameter":[{"name":"ownerEmail","valueString":"o@example.com"},{"name":"owner","valueReference":{"reference":"User/u-1"}},{"name":"x"}]}`,
			"", "", "Unknown parameter: x", "parameter"},
		{"nameless parameter", `{"resourceType":"Parameters","parameter":[{"valueString":"x"}]}`, "", "", "Unknown parameter: ", "parameter"},
		{"not Parameters", `{"resourceType":"Project","name":"x"}`, "", "", "Expected a Parameters resource", "resourceType"},
		{"no resource type", `{"parameter":[]}`, "", "", "Expected a Parameters resource", "resourceType"},
		{"not JSON", `{"resourceType":`, "", "", "Expected a Parameters resource", "resourceType"},
		{"parameter not a list", `{"resourceType":"Parameters","parameter":{"name":"name"}}`, "", "", "Expected a Parameters resource", "resourceType"},
		{"value of the wrong type", `{"resourceType":"Parameters","parameter":[{"name":"name","valueString":5}]}`, "", "", "Expected a Parameters resource", "resourceType"},
		{"reference of the wrong shape", `{"resourceType":"Parameters","parameter":[{"name":"owner","valueReference":"User/u-1"}]}`, "", "", "Expected a Parameters resource", "resourceType"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			project, ownerEmail, err := initParams([]byte(tc.body))
			if tc.text != "" {
				wantError(t, err, 400, tc.text, tc.expr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := json.Marshal(project); string(got) != tc.project {
				t.Errorf("project %s, want %s", got, tc.project)
			}
			if ownerEmail != tc.ownerEmail {
				t.Errorf("owner e-mail %q, want %q", ownerEmail, tc.ownerEmail)
			}
		})
	}
}

// The owner's invite is an invite like any other: it must pass the rules,
// and make a server-scoped admin who is e-mailed the set-password link.
func TestOwnerInvite(t *testing.T) {
	for _, name := range []string{"Clinic", "  Padded  ", strings.Repeat("Long ", 1000)} {
		body := ownerInvite(name, "owner@example.com")
		d, issues := checkInvite(readInvite(body))
		if len(issues) > 0 {
			t.Fatalf("%q: %v", name, issueLines(t, issues))
		}
		r := d.Request
		if r.ResourceType != "Practitioner" || r.FirstName != strings.TrimSpace(name) || r.LastName != "Admin" ||
			r.Email != "owner@example.com" || !r.SendEmail || r.ProjectScoped || r.Membership["admin"] != true {
			t.Errorf("%q: owner invite %+v", name, r)
		}
	}
}

// initBody is $init's Parameters, from name/value pairs (owner as a reference).
func initBody(kv ...string) string {
	var ps []any
	for i := 0; i+1 < len(kv); i += 2 {
		p := map[string]any{"name": kv[i], "valueString": kv[i+1]}
		if kv[i] == "owner" {
			p = map[string]any{"name": "owner", "valueReference": ref(kv[i+1])}
		}
		ps = append(ps, p)
	}
	b, _ := json.Marshal(map[string]any{"resourceType": "Parameters", "parameter": ps})
	return string(b)
}

func TestInitProjectRefusals(t *testing.T) {
	other := fixtureProject(t, nil)
	scoped := fixtureUser(t, other, invitee("scoped"))
	cases := []struct {
		name        string
		by          *bus.Principal
		contentType string
		body        string // %s is the project's name
		status      int
		text, expr  string
	}{
		{"anonymous", nil, "application/fhir+json", initBody("name", "%s"), 401, "Unauthorized", ""},
		{"a project's admin", adminOf(other), "application/fhir+json", initBody("name", "%s"), 403, "Forbidden", ""},
		{"not JSON", superAdmin(), "application/x-www-form-urlencoded", "name=%s", 415, "Unsupported media type", ""},
		{"not Parameters", superAdmin(), "application/fhir+json", `{"resourceType":"Project","name":"%s"}`, 400, "Expected a Parameters resource", "resourceType"},
		{"no name", superAdmin(), "application/fhir+json", initBody("ownerEmail", "%s@example.com"), 400, "Project name is required", "name"},
		{"an empty name", superAdmin(), "application/fhir+json", initBody("name", "", "ownerEmail", "%s@example.com"), 400, "Project name is required", "name"},
		{"owner and owner e-mail", superAdmin(), "application/fhir+json", initBody("name", "%s", "owner", "User/"+scoped, "ownerEmail", "a@example.com"),
			400, "Give owner or ownerEmail, not both", "parameter"},
		{"owner of another project", superAdmin(), "application/fhir+json", initBody("name", "%s", "owner", "User/"+scoped),
			400, "Project owner must not belong to another Project", "owner"},
		{"owner a patient", superAdmin(), "application/fhir+json", initBody("name", "%s", "owner", "Patient/"+scoped),
			400, "Only Users are permitted to be the owner of a new Project", "owner"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "Init refused " + uuid.NewString()[:8]
			stack.steps.script(name+"@example.com", stepScript{UserID: uuid.NewString()})
			resp, err := call(t, stack.svc.initProject, request(tc.by, nil, tc.contentType, strings.Replace(tc.body, "%s", name, 1)))
			wantFHIRError(t, resp, err, tc.status, tc.text, tc.expr)
			if n := projectsNamed(t, name); n != 0 {
				t.Errorf("%d projects after a refusal", n)
			}
		})
	}
}

func TestInitProject(t *testing.T) {
	// ownerOf checks a new project's owner: named in it, and its admin.
	ownerOf := func(t *testing.T, p map[string]any, user string) map[string]any {
		t.Helper()
		id := p["id"].(string)
		if o, _ := refOf(p["owner"]); o != "User/"+user {
			t.Errorf("owner %v, want User/%s", p["owner"], user)
		}
		ms := membersOf(t, id)
		if len(ms) != 1 || len(ms["User/"+user]) != 1 {
			t.Fatalf("memberships %v, want the owner's", ms)
		}
		m := ms["User/"+user][0]
		if m["admin"] != true {
			t.Errorf("owner's membership %v", m)
		}
		if e := sessionEntry(t, m["id"].(string)); e == nil || !e.Admin || !e.Active {
			t.Errorf("session entry %+v", e)
		}
		return m
	}

	t.Run("no owner", func(t *testing.T) {
		name := "Init " + uuid.NewString()[:8]
		resp, err := call(t, stack.svc.initProject, fhirJSON(superAdmin(), nil, initBody("name", name)))
		if err != nil {
			t.Fatal(err)
		}
		p := decode(t, string(resp.Body))
		if resp.Status != 201 || resp.Header["Location"] != testBaseURL+"fhir/R4/Project/"+p["id"].(string) || p["strictMode"] != true || p["owner"] != nil {
			t.Errorf("%d %v %s", resp.Status, resp.Header, resp.Body)
		}
		if n := projectsNamed(t, name); n != 1 {
			t.Errorf("%d projects", n)
		}
	})

	t.Run("an owner by reference", func(t *testing.T) {
		user := fixtureUser(t, "", invitee("by-ref"))
		p := mustCall(t, stack.svc.initProject, fhirJSON(superAdmin(), nil, initBody("name", "By reference", "owner", "User/"+user)), 201)
		ownerOf(t, p, user)
	})

	t.Run("an owner e-mail of a user the server has", func(t *testing.T) {
		email := invitee("known-owner")
		user := fixtureUser(t, "", email)
		p := mustCall(t, stack.svc.initProject, fhirJSON(superAdmin(), nil, initBody("name", "Known owner", "ownerEmail", "  "+strings.ToUpper(email)+" ")), 201)
		ownerOf(t, p, user)
		stack.steps.mu.Lock()
		defer stack.steps.mu.Unlock()
		if id := stack.steps.seen[email]; id != "" {
			t.Errorf("a known owner was invited (%s)", id)
		}
	})

	t.Run("an owner e-mail of a user the server has not", func(t *testing.T) {
		email := invitee("new-owner")
		user := uuid.NewString()
		stack.steps.script(email, stepScript{UserID: user, NewUser: true, SetPasswordURL: "https://app.example/setpassword/owner"})
		resp, err := call(t, stack.svc.initProject, fhirJSON(superAdmin(), nil, initBody("name", "New owner", "ownerEmail", email)))
		if err != nil {
			t.Fatal(err)
		}
		p := decode(t, string(resp.Body))
		if resp.Status != 201 || p["name"] != "New owner" {
			t.Fatalf("%d %s", resp.Status, resp.Body)
		}
		if got, want := resp.Header["Location"], testBaseURL+"fhir/R4/Project/"+p["id"].(string); got != want {
			t.Errorf("Location %q, want %q", got, want)
		}
		if author, _ := refOf(p["meta"].(map[string]any)["author"]); author != "Practitioner/super" {
			t.Errorf("author %q", author)
		}
		m := ownerOf(t, p, user)
		if by, _ := refOf(m["invitedBy"]); by != "User/super" {
			t.Errorf("invitedBy %v", m["invitedBy"])
		}
		if got, _ := json.Marshal(m["profile"].(map[string]any)["display"]); string(got) != `"New owner Admin"` {
			t.Errorf("profile %v", m["profile"])
		}
		id := stack.steps.lastInvite(t, email)
		waitInvite(t, id, func(r *invite.Record) bool { return r.Steps[invite.StepEmail].State == "done" })
		if eml := readMail(t, "invite-"+id); !strings.Contains(eml, "https://app.example/setpassword/owner") || !strings.Contains(eml, "You were invited to New owner.") {
			t.Errorf("e-mail:\n%s", eml)
		}
	})

	t.Run("an owner e-mail whose invite fails", func(t *testing.T) {
		email := invitee("failing-owner")
		name := "Failing owner " + uuid.NewString()[:8]
		stack.steps.script(email, stepScript{Err: fhir.BadRequest("Invalid e-mail domain")})
		resp, err := call(t, stack.svc.initProject, fhirJSON(superAdmin(), nil, initBody("name", name, "ownerEmail", email)))
		wantFHIRError(t, resp, err, 400, "Invalid e-mail domain", "")
	})
}
