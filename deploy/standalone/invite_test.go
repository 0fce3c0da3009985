package standalone

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// adminProject makes a project and returns its id and a super-admin token.
func adminProject(t *testing.T, name string) (string, string) {
	t.Helper()
	su := superToken(t)
	r := do(t, "POST", "admin/Project", su, "application/json", mustJSON(map[string]any{"resourceType": "Project", "name": name}))
	expect(t, r, 201)
	return r.json(t)["id"].(string), su
}

func inviteBody(kv ...any) []byte {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return mustJSON(m)
}

// mailTo waits for the .eml written for an address and returns its text.
func mailTo(t *testing.T, addr string) string {
	t.Helper()
	var mail string
	eventually(t, 15*time.Second, "an e-mail to "+addr, func() bool {
		files, _ := filepath.Glob(filepath.Join(dataDir, "mail", "*.eml"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err == nil && strings.Contains(string(b), "<"+addr+">") {
				mail = strings.ReplaceAll(string(b), "=\r\n", "")
				return true
			}
		}
		return false
	})
	return mail
}

var setPasswordLink = regexp.MustCompile(`setpassword/([0-9a-f-]{36})/([0-9a-f]{64})`)

// signIn runs the PKCE sign-in: /auth/login then the token endpoint.
func signIn(t *testing.T, email, password, projectID, scope string) map[string]any {
	t.Helper()
	verifier := "verifier-" + strings.Repeat("x", 40)
	sum := sha256.Sum256([]byte(verifier))
	challenge := base64.RawURLEncoding.EncodeToString(sum[:])
	body := map[string]any{"email": email, "password": password, "codeChallenge": challenge, "codeChallengeMethod": "S256", "scope": scope}
	if projectID != "" {
		body["projectId"] = projectID
	}
	r := do(t, "POST", "auth/login", "", "application/json", mustJSON(body))
	expect(t, r, 200)
	code, _ := r.json(t)["code"].(string)
	if code == "" {
		t.Fatalf("no code: %s", r.body)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier}}
	r = do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 200)
	return r.json(t)
}

func TestInviteStory(t *testing.T) {
	pid, su := adminProject(t, "Clinic")

	// The super admin invites an admin by e-mail; the admin sets a password from the link.
	r := do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Ada", "lastName", "Admin", "email", "Ada.Admin@Example.com", "admin", true))
	expect(t, r, 200)
	adminMember := r.json(t)
	if adminMember["admin"] != true || !strings.HasPrefix(adminMember["profile"].(map[string]any)["reference"].(string), "Practitioner/") {
		t.Fatalf("admin membership: %s", r.body)
	}
	msg := mailTo(t, "ada.admin@example.com")
	m := setPasswordLink.FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("no set-password link in: %s", msg)
	}
	expect(t, do(t, "POST", "auth/setpassword", "", "application/json", mustJSON(map[string]any{"id": m[1], "secret": m[2], "password": "correct horse"})), 200)
	r = do(t, "POST", "auth/setpassword", "", "application/json", mustJSON(map[string]any{"id": m[1], "secret": m[2], "password": "another one"}))
	expect(t, r, 400)
	if r.outcomeText(t) != "Already used" {
		t.Fatal(string(r.body))
	}

	// The admin signs in (PKCE) and gets a refresh token.
	tok := signIn(t, "ada.admin@example.com", "correct horse", "", "openid offline_access")
	admin := tok["access_token"].(string)
	if tok["refresh_token"] == nil || tok["project"].(map[string]any)["reference"] != "Project/"+pid {
		t.Fatalf("tokens: %v", tok)
	}
	me := do(t, "GET", "auth/me", admin, "", nil)
	expect(t, me, 200)
	if me.json(t)["profile"].(map[string]any)["resourceType"] != "Practitioner" {
		t.Fatalf("auth/me: %s", me.body)
	}

	// An access policy parameterised by the patient, and a Patient invited with it.
	r = do(t, "POST", "fhir/R4/AccessPolicy", admin, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "own records",
		"resource": []any{map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id"}},
	}))
	expect(t, r, 201)
	policy := "AccessPolicy/" + r.json(t)["id"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/invite", admin, "application/json",
		inviteBody("resourceType", "Patient", "firstName", "Pat", "lastName", "Ient", "email", "pat@example.com", "sendEmail", "false",
			"membership", map[string]any{"access": []any{map[string]any{
				"policy":    map[string]any{"reference": policy},
				"parameter": []any{map[string]any{"name": "patient", "valueReference": map[string]any{"reference": "Patient/x"}}},
			}}}))
	expect(t, r, 200)
	patientMember := r.json(t)
	if patientMember["access"] == nil || !strings.HasPrefix(patientMember["profile"].(map[string]any)["reference"].(string), "Patient/") {
		t.Fatalf("patient membership: %s", r.body)
	}

	// A Practitioner with a password, who signs in.
	r = do(t, "POST", "admin/projects/"+pid+"/invite", admin, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Pete", "lastName", "Practitioner", "email", "pete@example.com",
			"sendEmail", false, "password", "pete's password"))
	expect(t, r, 200)
	pete := r.json(t)
	peteID := pete["id"].(string)
	peteTok := signIn(t, "pete@example.com", "pete's password", "", "openid")["access_token"].(string)
	expect(t, do(t, "GET", "fhir/R4/Patient", peteTok, "", nil), 200)
	expect(t, do(t, "GET", "fhir/R4/ProjectMembership", peteTok, "", nil), 403)

	// Promote with PATCH, demote with POST, promote with POST.
	r = do(t, "PATCH", "admin/projects/"+pid+"/members/"+peteID, admin, "application/json-patch+json",
		[]byte(`[{"op":"replace","path":"/admin","value":true}]`))
	expect(t, r, 200)
	promoted := r.json(t)
	if promoted["admin"] != true {
		t.Fatalf("PATCH promote: %s", r.body)
	}
	// Promotion counts on the member's next request.
	expect(t, do(t, "GET", "fhir/R4/ProjectMembership", peteTok, "", nil), 200)
	promoted["admin"] = false
	r = do(t, "POST", "admin/projects/"+pid+"/members/"+peteID, admin, "application/json", mustJSON(promoted))
	expect(t, r, 200)
	if r.json(t)["admin"] != false {
		t.Fatalf("POST demote: %s", r.body)
	}
	expect(t, do(t, "GET", "fhir/R4/ProjectMembership", peteTok, "", nil), 403)
	// Only admin, accessPolicy, access and active may change.
	bad := r.json(t)
	bad["profile"] = map[string]any{"reference": "Practitioner/someone-else"}
	r = do(t, "POST", "admin/projects/"+pid+"/members/"+peteID, admin, "application/json", mustJSON(bad))
	expect(t, r, 400)
	if e := r.json(t)["issue"].([]any)[0].(map[string]any)["expression"].([]any)[0]; e != "profile" {
		t.Fatalf("expression %v", e)
	}

	// Member searches by profile type.
	count := func(q string) int {
		r := do(t, "GET", "fhir/R4/ProjectMembership?"+q, admin, "", nil)
		expect(t, r, 200)
		e, _ := r.json(t)["entry"].([]any)
		return len(e)
	}
	if n := count(""); n != 3 {
		t.Errorf("all members: %d", n)
	}
	if n := count("profile-type:not=ClientApplication,Bot"); n != 3 {
		t.Errorf("human members: %d", n)
	}
	if n := count("profile-type=Patient"); n != 1 {
		t.Errorf("patients: %d", n)
	}
	if n := count("profile-type=Practitioner"); n != 2 {
		t.Errorf("practitioners: %d", n)
	}

	// A duplicate invite is a conflict.
	r = do(t, "POST", "admin/projects/"+pid+"/invite", admin, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Pete", "lastName", "Practitioner", "email", "pete@example.com", "sendEmail", false))
	expect(t, r, 409)
	if r.outcomeText(t) != "User is already a member of this project" {
		t.Fatal(string(r.body))
	}

	// A member's profile cannot be deleted while the member exists.
	peteProfile := pete["profile"].(map[string]any)["reference"].(string)
	r = do(t, "DELETE", "fhir/R4/"+peteProfile, admin, "", nil)
	expect(t, r, 409)

	// Removing the Practitioner: the profile stays, the token dies at once.
	expect(t, do(t, "DELETE", "admin/projects/"+pid+"/members/"+peteID, admin, "", nil), 200)
	expect(t, do(t, "GET", "fhir/R4/Patient", peteTok, "", nil), 401)
	expect(t, do(t, "GET", "fhir/R4/"+peteProfile, admin, "", nil), 200)
	expect(t, do(t, "GET", "admin/projects/"+pid+"/members/"+peteID, admin, "", nil), 410)

	// Paging through members with next links.
	next, pages, members := "fhir/R4/ProjectMembership?_count=1", 0, 0
	for next != "" {
		r = do(t, "GET", next, admin, "", nil)
		expect(t, r, 200)
		b := r.json(t)
		e, _ := b["entry"].([]any)
		members += len(e)
		pages++
		next = ""
		for _, l := range b["link"].([]any) {
			if l.(map[string]any)["relation"] == "next" {
				u := l.(map[string]any)["url"].(string)
				next = u[strings.Index(u, "fhir/R4/"):]
			}
		}
	}
	if members != 2 || pages < 2 {
		t.Errorf("paged %d members over %d pages, want 2 over at least 2", members, pages)
	}

	// Refresh: rotation, and a spent refresh token ends the chain.
	refresh := tok["refresh_token"].(string)
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}
	r = do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 200)
	fresh := r.json(t)
	expect(t, do(t, "GET", "auth/me", fresh["access_token"].(string), "", nil), 200)
	r = do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 400)
	expect(t, do(t, "GET", "auth/me", fresh["access_token"].(string), "", nil), 401)
}

func TestInviteValidationAndRights(t *testing.T) {
	pid, su := adminProject(t, "Validation")
	other, _ := adminProject(t, "Other")
	_, member := project(t, "member only")
	valid := func(kv ...any) []byte {
		m := map[string]any{"resourceType": "Practitioner", "firstName": "A", "lastName": "B", "email": "val@example.com", "sendEmail": false}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		return mustJSON(m)
	}
	cases := []struct {
		name       string
		body       []byte
		text, expr string
	}{
		{"resource type", valid("resourceType", "Observation"), "Resource type is required", "resourceType"},
		{"first name", valid("firstName", ""), "First name is required", "firstName"},
		{"last name", valid("lastName", nil), "Last name is required", "lastName"},
		{"email", valid("email", "not-an-email"), "Either email or externalId is required", "email"},
		{"sendEmail", valid("sendEmail", "maybe"), "sendEmail must be a boolean", "sendEmail"},
		{"admin", valid("admin", "yes"), "admin must be a boolean", "admin"},
		{"unknown field", valid("superAdmin", true), "Unknown field: superAdmin", "superAdmin"},
		{"mass assignment", valid("membership", map[string]any{"project": map[string]any{"reference": "Project/" + other}}), "An invite cannot set membership.project", "membership.project"},
		{"missing policy", valid("membership", map[string]any{"access": []any{map[string]any{"policy": map[string]any{"reference": "AccessPolicy/00000000-0000-0000-0000-000000000000"}}}}),
			"Access policy AccessPolicy/00000000-0000-0000-0000-000000000000 does not exist", "membership.access[0].policy"},
		{"short password", valid("password", "short"), "Invalid password, must be at least 8 characters", "password"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json", tc.body)
			expect(t, r, 400)
			issue := r.json(t)["issue"].([]any)[0].(map[string]any)
			if r.outcomeText(t) != tc.text {
				t.Fatalf("text %q, want %q", r.outcomeText(t), tc.text)
			}
			if expr, _ := issue["expression"].([]any); len(expr) == 0 || expr[0] != tc.expr {
				t.Fatalf("expression %v, want %s", issue["expression"], tc.expr)
			}
		})
	}
	// Nothing was written: the one valid invite still succeeds as new.
	r := do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json", valid())
	expect(t, r, 200)

	// A policy of another project is refused.
	r = do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{"resourceType": "AccessPolicy", "name": "elsewhere"}))
	expect(t, r, 201)
	r = do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		valid("email", "p2@example.com", "membership", map[string]any{"accessPolicy": map[string]any{"reference": "AccessPolicy/" + r.json(t)["id"].(string)}}))
	expect(t, r, 400)
	if !strings.Contains(r.outcomeText(t), "does not belong to this project") {
		t.Fatal(string(r.body))
	}

	// Rights: a non-admin member gets 403; an unknown project 404; no token 401.
	expect(t, do(t, "POST", "admin/projects/"+pid+"/invite", member, "application/json", valid("email", "x@example.com")), 403)
	expect(t, do(t, "POST", "admin/projects/00000000-0000-0000-0000-000000000000/invite", su, "application/json", valid("email", "x@example.com")), 404)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/invite", "", "application/json", valid("email", "x@example.com")), 401)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/invite", su, "text/plain", valid("email", "x@example.com")), 415)
}

// Two invites of the same person at once end in one membership and one 409.
func TestConcurrentInvites(t *testing.T) {
	pid, su := adminProject(t, "Concurrent")
	for round := 0; round < 3; round++ {
		email := fmt.Sprintf("twin%d@example.com", round)
		var wg sync.WaitGroup
		statuses := make([]int, 2)
		for i := range statuses {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				r := do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
					inviteBody("resourceType", "Practitioner", "firstName", "Twin", "lastName", "T", "email", email, "sendEmail", false))
				statuses[i] = r.status
			}(i)
		}
		wg.Wait()
		if !(statuses[0] == 200 && statuses[1] == 409 || statuses[0] == 409 && statuses[1] == 200) {
			t.Fatalf("round %d: statuses %v, want one 200 and one 409", round, statuses)
		}
	}
	// The super admin sees every project's memberships: this one's only.
	r := do(t, "GET", "fhir/R4/ProjectMembership?_count=100&_project="+pid, su, "", nil)
	expect(t, r, 200)
	seen := map[string]int{}
	for _, e := range r.json(t)["entry"].([]any) {
		u := e.(map[string]any)["resource"].(map[string]any)["user"].(map[string]any)["display"]
		if s, _ := u.(string); strings.HasPrefix(s, "twin") {
			seen[s]++
		}
	}
	for email, n := range seen {
		if n != 1 {
			t.Errorf("%s has %d memberships", email, n)
		}
	}
	if len(seen) != 3 {
		t.Errorf("memberships for %d twins, want 3", len(seen))
	}
	r = do(t, "GET", "fhir/R4/Practitioner?email=twin0@example.com&_project="+pid, su, "", nil)
	expect(t, r, 200)
	if e, _ := r.json(t)["entry"].([]any); len(e) != 1 {
		t.Errorf("twin0 has %d profiles, want 1", len(e))
	}
}

// A server-scoped user in two projects chooses a membership at sign-in, and
// each token sees only its own project; a project-scoped user (a Patient)
// signs in with the projectId.
func TestSignInChoosesMembership(t *testing.T) {
	p1, su := adminProject(t, "Two projects one")
	p2, _ := adminProject(t, "Two projects two")
	for _, p := range []string{p1, p2} {
		r := do(t, "POST", "admin/projects/"+p+"/invite", su, "application/json",
			inviteBody("resourceType", "Practitioner", "firstName", "Dual", "lastName", "Member", "email", "dual@example.com",
				"sendEmail", false, "password", "dual password"))
		expect(t, r, 200)
	}
	verifier := strings.Repeat("v", 50)
	r := do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
		"email": "dual@example.com", "password": "dual password", "codeChallenge": verifier, "codeChallengeMethod": "plain"}))
	expect(t, r, 200)
	login := r.json(t)
	choices, _ := login["memberships"].([]any)
	if len(choices) != 2 || login["code"] != nil {
		t.Fatalf("want a choice of two memberships: %s", r.body)
	}
	tokens := map[string]string{}
	for _, c := range choices {
		m := c.(map[string]any)
		// Each choice needs its own login.
		r = do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
			"email": "dual@example.com", "password": "dual password", "codeChallenge": verifier, "codeChallengeMethod": "plain"}))
		expect(t, r, 200)
		r = do(t, "POST", "auth/profile", "", "application/json", mustJSON(map[string]any{"login": r.json(t)["login"], "profile": m["id"]}))
		expect(t, r, 200)
		form := url.Values{"grant_type": {"authorization_code"}, "code": {r.json(t)["code"].(string)}, "code_verifier": {verifier}}
		r = do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
		expect(t, r, 200)
		ref := m["project"].(map[string]any)["reference"].(string)
		tokens[strings.TrimPrefix(ref, "Project/")] = r.json(t)["access_token"].(string)
	}
	r = do(t, "POST", "fhir/R4/Patient", tokens[p1], "application/fhir+json", patient("OnlyInOne"))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	expect(t, do(t, "GET", "fhir/R4/Patient/"+id, tokens[p1], "", nil), 200)
	expect(t, do(t, "GET", "fhir/R4/Patient/"+id, tokens[p2], "", nil), 404)
	// Choosing another user's membership is refused.
	r = do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
		"email": "dual@example.com", "password": "dual password", "codeChallenge": verifier, "codeChallengeMethod": "plain"}))
	r = do(t, "POST", "auth/profile", "", "application/json", mustJSON(map[string]any{"login": r.json(t)["login"], "profile": "00000000-0000-0000-0000-000000000000"}))
	expect(t, r, 400)

	// A Patient is a project-scoped user: found with the projectId only.
	r = do(t, "POST", "admin/projects/"+p1+"/invite", su, "application/json",
		inviteBody("resourceType", "Patient", "firstName", "Scoped", "lastName", "Patient", "email", "scoped@example.com",
			"sendEmail", false, "password", "scoped password"))
	expect(t, r, 200)
	r = do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
		"email": "scoped@example.com", "password": "scoped password", "codeChallenge": verifier, "codeChallengeMethod": "plain"}))
	expect(t, r, 400)
	tok := signIn(t, "scoped@example.com", "scoped password", p1, "openid")
	if !strings.HasPrefix(tok["profile"].(map[string]any)["reference"].(string), "Patient/") || tok["patient"] == nil {
		t.Fatalf("patient tokens: %v", tok)
	}
	// Wrong password, then the brute-force limiter.
	r = do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
		"email": "scoped@example.com", "password": "wrong password", "projectId": p1, "codeChallenge": verifier, "codeChallengeMethod": "plain"}))
	expect(t, r, 400)
	if r.outcomeText(t) != "Email or password is invalid" {
		t.Fatal(string(r.body))
	}
}

func TestProjectInit(t *testing.T) {
	su := superToken(t)
	params := func(kv ...string) []byte {
		var p []any
		for i := 0; i+1 < len(kv); i += 2 {
			p = append(p, map[string]any{"name": kv[i], "valueString": kv[i+1]})
		}
		return mustJSON(map[string]any{"resourceType": "Parameters", "parameter": p})
	}
	r := do(t, "POST", "fhir/R4/Project/$init", su, "application/fhir+json", params("name", "Initialised", "ownerEmail", "Owner@Example.com"))
	expect(t, r, 201)
	p := r.json(t)
	owner, _ := p["owner"].(map[string]any)
	if p["name"] != "Initialised" || owner == nil || !strings.HasPrefix(owner["reference"].(string), "User/") {
		t.Fatalf("$init: %s", r.body)
	}
	// The owner was invited as admin: set the password from the e-mail and sign in.
	m := setPasswordLink.FindStringSubmatch(mailTo(t, "owner@example.com"))
	expect(t, do(t, "POST", "auth/setpassword", "", "application/json", mustJSON(map[string]any{"id": m[1], "secret": m[2], "password": "owner password"})), 200)
	tok := signIn(t, "owner@example.com", "owner password", "", "openid")["access_token"].(string)
	r = do(t, "GET", "admin/projects/"+p["id"].(string), tok, "", nil)
	expect(t, r, 200)
	// The owner cannot be removed.
	me := do(t, "GET", "auth/me", tok, "", nil)
	mid := me.json(t)["membership"].(map[string]any)["id"].(string)
	r = do(t, "DELETE", "admin/projects/"+p["id"].(string)+"/members/"+mid, su, "", nil)
	expect(t, r, 400)
	if r.outcomeText(t) != "Cannot delete the owner of the project" {
		t.Fatal(string(r.body))
	}
	_, member := project(t, "not super")
	expect(t, do(t, "POST", "fhir/R4/Project/$init", member, "application/fhir+json", params("name", "x")), 403)
	expect(t, do(t, "POST", "fhir/R4/Project/$init", su, "application/fhir+json", params("name", "")), 400)
}

func TestInviteRelatedPerson(t *testing.T) {
	pid, su := adminProject(t, "Related")
	r := do(t, "POST", "fhir/R4/Patient", su, "application/fhir+json", patient("Child"))
	expect(t, r, 201)
	child := "Patient/" + r.json(t)["id"].(string)
	// The Patient was created in the super admin's project: not this one.
	r = do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "RelatedPerson", "firstName", "Rel", "lastName", "Ated", "email", "rel@example.com", "sendEmail", false,
			"patient", map[string]any{"reference": child}))
	expect(t, r, 400)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "RelatedPerson", "firstName", "Rel", "lastName", "Ated", "email", "rel@example.com", "sendEmail", false)), 400)
	r = do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "Patient", "firstName", "Kid", "lastName", "Patient", "email", "kid@example.com", "sendEmail", false))
	expect(t, r, 200)
	kid := r.json(t)["profile"].(map[string]any)["reference"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "RelatedPerson", "firstName", "Rel", "lastName", "Ated", "email", "rel@example.com", "sendEmail", false,
			"patient", map[string]any{"reference": kid}))
	expect(t, r, 200)
	rp := r.json(t)["profile"].(map[string]any)["reference"].(string)
	r = do(t, "GET", "fhir/R4/"+rp, su, "", nil)
	expect(t, r, 200)
	if r.json(t)["patient"].(map[string]any)["reference"] != kid {
		t.Fatalf("RelatedPerson.patient: %s", r.body)
	}

	// A RelatedPerson the project already has, matched by e-mail, is the
	// profile of the invite, with no patient given (as in Medplum).
	r = do(t, "POST", "fhir/R4/RelatedPerson", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "RelatedPerson", "meta": map[string]any{"project": pid},
		"patient": map[string]any{"reference": kid},
		"telecom": []any{map[string]any{"system": "email", "value": "aunt@example.com"}}}))
	expect(t, r, 201)
	aunt := "RelatedPerson/" + r.json(t)["id"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "RelatedPerson", "firstName", "Aunt", "lastName", "Ie", "email", "Aunt@example.com", "sendEmail", false))
	expect(t, r, 200)
	if got := r.json(t)["profile"].(map[string]any)["reference"]; got != aunt {
		t.Fatalf("profile %v, want the existing %s", got, aunt)
	}
	// The same e-mail in another project matches nothing here.
	other, _ := adminProject(t, "Related elsewhere")
	expectOutcome(t, do(t, "POST", "admin/projects/"+other+"/invite", su, "application/json",
		inviteBody("resourceType", "RelatedPerson", "firstName", "Aunt", "lastName", "Ie", "email", "aunt@example.com", "sendEmail", false)),
		400, "patient is required to invite a RelatedPerson")
}
