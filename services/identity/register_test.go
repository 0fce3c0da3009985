package identity

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/search"
	"github.com/pinion-health/pinion/services/identity/limits"
)

// register posts to /auth/newuser and returns the new sign-in's id.
func register(t *testing.T, s *Service, fields map[string]any) string {
	t.Helper()
	body := map[string]any{"firstName": "Grace", "lastName": "Hopper", "password": "a long password",
		"codeChallenge": rfcChallenge, "codeChallengeMethod": "S256"}
	for k, v := range fields {
		body[k] = v
	}
	resp, err := s.registration.NewUser(context.Background(), jsonRequest("10.3.0.1", body))
	out := decoded(t, resp, err, 200)
	id, _ := out["login"].(string)
	if len(out) != 1 || id == "" {
		t.Fatalf("answer %v", out)
	}
	return id
}

// readJSON reads a stored resource's fields.
func readJSON(t *testing.T, typ, id string) map[string]any {
	t.Helper()
	res, err := live.conns.Repo.Read(context.Background(), repo.AllProjects, typ, id)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(res.JSON, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRegisterNewProject(t *testing.T) {
	ctx := context.Background()
	email := newEmail("grace")
	loginID := register(t, live.svc, map[string]any{"email": "  " + strings.ToUpper(email) + " "})
	l, err := live.conns.Sessions.GetLogin(ctx, loginID)
	if err != nil {
		t.Fatal(err)
	}
	if l.Membership != "" || l.Project != "" || l.Challenge != rfcChallenge || !strings.HasPrefix(l.User, "User/") {
		t.Fatalf("login %+v", l)
	}
	u := readJSON(t, "User", strings.TrimPrefix(l.User, "User/"))
	if u["email"] != email || u["firstName"] != "Grace" || u["project"] != nil {
		t.Fatalf("user %v", u)
	}

	t.Run("the address again, in other letters", func(t *testing.T) {
		_, err := live.svc.registration.NewUser(ctx, jsonRequest("10.3.0.2", map[string]any{"firstName": "G", "lastName": "H",
			"email": strings.ToUpper(email), "password": "another password"}))
		expectOutcome(t, err, 400, "Email already registered", "email")
	})

	t.Run("no project yet: no code", func(t *testing.T) {
		_, err := live.svc.signins.ChooseProfile(ctx, jsonRequest("10.3.0.2", map[string]any{"login": loginID, "profile": "x"}))
		expectOutcome(t, err, 400, "Profile not found", "profile")
	})

	t.Run("refusals", func(t *testing.T) {
		for _, tc := range []struct {
			name        string
			body        map[string]any
			status      int
			text, field string
		}{
			{"no login", map[string]any{"projectName": "Clinic"}, 400, "Login ID is required.", "login"},
			{"a short name", map[string]any{"login": loginID, "projectName": "abc"}, 400, "Project name must be between 4 and 72 characters", "projectName"},
			{"an unknown login", map[string]any{"login": "00000000-0000-4000-8000-000000000000", "projectName": "Clinic"}, 404, "Not found", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := live.svc.registration.NewProject(ctx, jsonRequest("10.3.0.3", tc.body))
				expectOutcome(t, err, tc.status, tc.text, tc.field)
			})
		}
	})

	resp, err := live.svc.registration.NewProject(ctx, jsonRequest("10.3.0.3", map[string]any{"login": loginID, "projectName": "Grace's Clinic"}))
	out := decoded(t, resp, err, 200)
	code, _ := out["code"].(string)
	if out["login"] != loginID || !strings.HasPrefix(code, loginID+".") {
		t.Fatalf("answer %v", out)
	}
	tokens := decoded(t, redeem(t, code), nil, 200)
	profile := tokens["profile"].(map[string]any)["reference"].(string)
	project := tokens["project"].(map[string]any)["reference"].(string)
	if !strings.HasPrefix(profile, "Practitioner/") {
		t.Fatalf("tokens %v", tokens)
	}
	p := readJSON(t, "Project", strings.TrimPrefix(project, "Project/"))
	if p["name"] != "Grace's Clinic" || p["strictMode"] != true || p["owner"].(map[string]any)["reference"] != l.User {
		t.Fatalf("project %v", p)
	}
	l, err = live.conns.Sessions.GetLogin(ctx, loginID)
	if err != nil {
		t.Fatal(err)
	}
	m, err := live.conns.Sessions.GetMembership(ctx, l.Membership)
	if err != nil || !m.Admin || m.Profile != profile {
		t.Fatalf("membership %+v %v", m, err)
	}

	t.Run("the project's default client", func(t *testing.T) {
		// As Medplum's createProject: one client, named after the
		// project, with a secret and a membership of its own.
		projectID := strings.TrimPrefix(project, "Project/")
		all, _ := search.Parse("ClientApplication", url.Values{})
		page, err := live.conns.Repo.Search(ctx, repo.Scope{Project: projectID}, "ClientApplication", all)
		if err != nil || len(page.Resources) != 1 {
			t.Fatalf("clients %v %v", page, err)
		}
		c, _ := page.Resources[0].Decode()
		if c["name"] != "Grace's Clinic Default Client" || c["description"] != "Default client for Grace's Clinic" {
			t.Fatalf("client %v", c)
		}
		if cred, err := live.svc.clients.Credentials(ctx, page.Resources[0].ID); err != nil || cred == nil {
			t.Fatalf("the client has no secret: %v %v", cred, err)
		}
		q, _ := search.Parse("ProjectMembership", url.Values{"profile": {"ClientApplication/" + page.Resources[0].ID}})
		members, err := live.conns.Repo.Search(ctx, repo.Scope{Project: projectID}, "ProjectMembership", q)
		if err != nil || len(members.Resources) != 1 {
			t.Fatalf("the client's membership %v %v", members, err)
		}
	})

	t.Run("a second project on the same sign-in", func(t *testing.T) {
		_, err := live.svc.registration.NewProject(ctx, jsonRequest("10.3.0.3", map[string]any{"login": loginID, "projectName": "Another Clinic"}))
		expectOutcome(t, err, 400, "Login already has a membership", "")
	})
}

func TestRegisterPatient(t *testing.T) {
	ctx := context.Background()
	clinic := newProject(t, "Open Clinic")
	policy := newResource(t, clinic, map[string]any{"resourceType": "AccessPolicy", "name": "patients",
		"resource": []any{map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id"}}})
	setProject(t, clinic, func(p map[string]any) { p["defaultPatientAccessPolicy"] = map[string]any{"reference": policy} })
	closed := newProject(t, "Closed Clinic")

	t.Run("a project without a patient policy takes no registrations", func(t *testing.T) {
		for _, project := range []string{closed, "00000000-0000-4000-8000-000000000000", "not-an-id"} {
			_, err := live.svc.registration.NewUser(ctx, jsonRequest("10.3.1.1", map[string]any{"firstName": "P", "lastName": "Q",
				"email": newEmail("closed"), "password": "a long password", "projectId": project}))
			expectOutcome(t, err, 400, "Project does not allow open registration", "")
		}
	})

	email := newEmail("patient")
	loginID := register(t, live.svc, map[string]any{"email": email, "projectId": clinic})
	l, err := live.conns.Sessions.GetLogin(ctx, loginID)
	if err != nil {
		t.Fatal(err)
	}
	u := readJSON(t, "User", strings.TrimPrefix(l.User, "User/"))
	if u["project"].(map[string]any)["reference"] != "Project/"+clinic {
		t.Fatalf("user %v", u)
	}

	t.Run("the same address may register in another scope, not this one", func(t *testing.T) {
		register(t, live.svc, map[string]any{"email": email})
		_, err := live.svc.registration.NewUser(ctx, jsonRequest("10.3.1.1", map[string]any{"firstName": "P", "lastName": "Q",
			"email": email, "password": "a long password", "projectId": clinic}))
		expectOutcome(t, err, 400, "Email already registered", "email")
	})

	t.Run("refusals", func(t *testing.T) {
		serverWide := register(t, live.svc, map[string]any{"email": newEmail("server")})
		for _, tc := range []struct {
			name        string
			body        map[string]any
			status      int
			text, field string
		}{
			{"no login", map[string]any{"projectId": clinic}, 400, "Missing login", "login"},
			{"no project", map[string]any{"login": loginID}, 400, "Project ID is required", "projectId"},
			{"a server-wide user", map[string]any{"login": serverWide, "projectId": clinic}, 400, "User must be scoped to the project", ""},
			{"another project", map[string]any{"login": loginID, "projectId": closed}, 400, "User must be scoped to the project", ""},
			{"an unknown login", map[string]any{"login": "00000000-0000-4000-8000-000000000000", "projectId": clinic}, 404, "Not found", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := live.svc.registration.NewPatient(ctx, jsonRequest("10.3.1.2", tc.body))
				expectOutcome(t, err, tc.status, tc.text, tc.field)
			})
		}
		// A patient user cannot found a project of their own.
		_, err := live.svc.registration.NewProject(ctx, jsonRequest("10.3.1.2", map[string]any{"login": loginID, "projectName": "My own clinic"}))
		expectOutcome(t, err, 400, "Project owner must not belong to another Project", "")
	})

	resp, err := live.svc.registration.NewPatient(ctx, jsonRequest("10.3.1.3", map[string]any{"login": loginID, "projectId": clinic}))
	out := decoded(t, resp, err, 200)
	code, _ := out["code"].(string)
	if out["login"] != loginID || !strings.HasPrefix(code, loginID+".") {
		t.Fatalf("answer %v", out)
	}
	tokens := decoded(t, redeem(t, code), nil, 200)
	profile := tokens["profile"].(map[string]any)["reference"].(string)
	if !strings.HasPrefix(profile, "Patient/") || tokens["patient"] != strings.TrimPrefix(profile, "Patient/") {
		t.Fatalf("tokens %v", tokens)
	}
	l, err = live.conns.Sessions.GetLogin(ctx, loginID)
	if err != nil {
		t.Fatal(err)
	}
	pm := readJSON(t, "ProjectMembership", l.Membership)
	if pm["accessPolicy"].(map[string]any)["reference"] != policy || pm["admin"] != nil {
		t.Fatalf("membership %v", pm)
	}
	pt := readJSON(t, "Patient", strings.TrimPrefix(profile, "Patient/"))
	if pt["name"].([]any)[0].(map[string]any)["family"] != "Hopper" {
		t.Fatalf("patient %v", pt)
	}

	t.Run("a second patient on the same sign-in", func(t *testing.T) {
		_, err := live.svc.registration.NewPatient(ctx, jsonRequest("10.3.1.3", map[string]any{"login": loginID, "projectId": clinic}))
		expectOutcome(t, err, 400, "Login already has a membership", "")
	})
}

func TestRegistrationDisabled(t *testing.T) {
	s := another(t, Config{BaseURL: testBase, RegisterDisabled: true})
	email := newEmail("off")
	_, err := s.registration.NewUser(context.Background(), jsonRequest("10.3.2.1", map[string]any{"firstName": "O", "lastName": "F",
		"email": email, "password": "a long password"}))
	expectOutcome(t, err, 400, "Registration is disabled", "")
	if owner, err := live.conns.Repo.ClaimOwner(context.Background(), repo.UserEmailKey("", email)); err != nil || owner != "" {
		t.Fatalf("a user was made: %q %v", owner, err)
	}
}

// setProject changes a stored project.
func setProject(t *testing.T, id string, edit func(map[string]any)) { live.kit.SetProject(t, id, edit) }

// An address is one person however it is typed: trimmed and case-folded
// at sign-in as at registration.
func TestEmailNormalisedAtSignIn(t *testing.T) {
	p := newPerson(t, "spaces")
	resp, err := p.login(t, "10.3.3.1", map[string]any{"email": "  " + strings.ToUpper(p.email) + "\t"})
	if out := decoded(t, resp, err, 200); out["code"] == nil {
		t.Fatalf("answer %v", out)
	}
}

// Registrations from one address are limited (limits.SignIns.Register):
// past limits.MaxRegistrationsPerAddress, /auth/newuser answers 429.
func TestNewUserRegistrationsLimited(t *testing.T) {
	s := another(t, Config{BaseURL: testBase})
	body := func(i int) map[string]any {
		return map[string]any{"firstName": "Many", "lastName": "Accounts", "email": newEmail(fmt.Sprintf("many%d", i)), "password": "a long password"}
	}
	for i := range limits.MaxRegistrationsPerAddress {
		resp, err := s.registration.NewUser(context.Background(), jsonRequest("10.7.0.1", body(i)))
		decoded(t, resp, err, 200)
	}
	_, err := s.registration.NewUser(context.Background(), jsonRequest("10.7.0.1", body(-1)))
	expectOutcome(t, err, 429, "Too Many Requests", "")
}

// A leaked password is refused at registration, and takes no address.
func TestRegistrationRefusesLeakedPassword(t *testing.T) {
	ctx := context.Background()
	email := newEmail("leaked")
	_, err := live.svc.registration.NewUser(ctx, jsonRequest("10.3.6.1", map[string]any{"firstName": "L", "lastName": "P",
		"email": email, "password": "ILoveYou"}))
	expectOutcome(t, err, 400, "Password found in breach database", "password")
	register(t, live.svc, map[string]any{"email": email}) // the address was not taken
}
