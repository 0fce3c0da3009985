package standalone

import (
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// registered posts /auth/newuser with PKCE from seed, and returns the
// sign-in id and the verifier that redeems its code.
func registered(t *testing.T, first, email, password, projectID string) (login, verifier string) {
	t.Helper()
	verifier, challenge := pkce("register-" + first)
	body := map[string]any{"firstName": first, "lastName": "Registered", "email": email, "password": password,
		"codeChallenge": challenge, "codeChallengeMethod": "S256", "scope": "openid offline_access"}
	if projectID != "" {
		body["projectId"] = projectID
	}
	r := do(t, "POST", "auth/newuser", "", "application/json", mustJSON(body))
	expect(t, r, 200)
	m := r.json(t)
	login, _ = m["login"].(string)
	if login == "" || len(m) != 1 {
		t.Fatalf("newuser: %s", r.body)
	}
	return login, verifier
}

// redeemCode exchanges a registration's code for tokens.
func redeemCode(t *testing.T, answer map[string]any, verifier string) map[string]any {
	t.Helper()
	code, _ := answer["code"].(string)
	if code == "" {
		t.Fatalf("no code: %v", answer)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier}}
	r := do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 200)
	return r.json(t)
}

// refused checks a 400 OperationOutcome with Medplum's text.
func refused(t *testing.T, r *response, text string) {
	t.Helper()
	expect(t, r, 400)
	if got := r.outcomeText(t); got != text {
		t.Fatalf("%q, want %q", got, text)
	}
}

// Register → create a project → sign in → invite; a patient signs up to
// the project under its default patient policy and reads only themself.
func TestRegisterStory(t *testing.T) {
	suffix := uuid.NewString()[:8]
	email := "founder-" + suffix + "@example.com"
	login, verifier := registered(t, "Founder", email, "a long password", "")

	r := do(t, "POST", "auth/newproject", "", "application/json", mustJSON(map[string]any{"login": login, "projectName": "Founded Clinic"}))
	expect(t, r, 200)
	tok := redeemCode(t, r.json(t), verifier)
	pid := strings.TrimPrefix(tok["project"].(map[string]any)["reference"].(string), "Project/")
	if tok["refresh_token"] == nil || !strings.HasPrefix(tok["profile"].(map[string]any)["reference"].(string), "Practitioner/") {
		t.Fatalf("tokens: %v", tok)
	}

	// The founder signs in again with the password, and is the project's admin.
	tok = signIn(t, email, "a long password", "", "openid")
	admin := tok["access_token"].(string)
	if tok["project"].(map[string]any)["reference"] != "Project/"+pid {
		t.Fatalf("sign-in: %v", tok)
	}
	expect(t, do(t, "POST", "admin/projects/"+pid+"/invite", admin, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Nurse", "lastName", "Invited", "email", "nurse-"+suffix+"@example.com")), 200)

	t.Run("the address again", func(t *testing.T) {
		r := do(t, "POST", "auth/newuser", "", "application/json", mustJSON(map[string]any{
			"firstName": "Other", "lastName": "Person", "email": strings.ToUpper(email), "password": "another password"}))
		refused(t, r, "Email already registered")
	})

	t.Run("no patient sign-up before the project allows it", func(t *testing.T) {
		r := do(t, "POST", "auth/newuser", "", "application/json", mustJSON(map[string]any{
			"firstName": "Early", "lastName": "Patient", "email": "early-" + suffix + "@example.com", "password": "a long password", "projectId": pid}))
		refused(t, r, "Project does not allow open registration")
	})

	// The project's patient policy: a patient reads and writes only themself.
	r = do(t, "POST", "fhir/R4/AccessPolicy", admin, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "patients",
		"resource": []any{map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id"}}}))
	expect(t, r, 201)
	policy := "AccessPolicy/" + r.json(t)["id"].(string)
	// Set by a super admin: a project's admins read their Project but
	// change it only through /admin routes, and none sets this field yet.
	su := superToken(t)
	r = do(t, "GET", "fhir/R4/Project/"+pid, su, "", nil)
	expect(t, r, 200)
	p := r.json(t)
	p["defaultPatientAccessPolicy"] = map[string]any{"reference": policy}
	expect(t, do(t, "PUT", "fhir/R4/Project/"+pid, su, "application/fhir+json", mustJSON(p)), 200)

	other := do(t, "POST", "fhir/R4/Patient", admin, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "name": []any{map[string]any{"family": "Someone-Else"}}}))
	expect(t, other, 201)
	otherID := other.json(t)["id"].(string)

	patientLogin, patientVerifier := registered(t, "Pat", "pat-"+suffix+"@example.com", "a long password", pid)
	r = do(t, "POST", "auth/newpatient", "", "application/json", mustJSON(map[string]any{"login": patientLogin, "projectId": pid}))
	expect(t, r, 200)
	ptok := redeemCode(t, r.json(t), patientVerifier)
	patient := ptok["access_token"].(string)
	self, _ := ptok["patient"].(string)
	if self == "" || ptok["project"].(map[string]any)["reference"] != "Project/"+pid {
		t.Fatalf("patient tokens: %v", ptok)
	}
	expect(t, do(t, "GET", "fhir/R4/Patient/"+self, patient, "", nil), 200)
	if r := do(t, "GET", "fhir/R4/Patient/"+otherID, patient, "", nil); r.status != 403 && r.status != 404 {
		t.Fatalf("another patient: %d %s", r.status, r.body)
	}
	r = do(t, "GET", "fhir/R4/Patient", patient, "", nil)
	expect(t, r, 200)
	if entries, _ := r.json(t)["entry"].([]any); len(entries) != 1 {
		t.Fatalf("a patient's search: %s", r.body)
	}
	// Their membership is the project's default patient policy.
	r = do(t, "GET", "fhir/R4/ProjectMembership?profile=Patient/"+self, admin, "", nil)
	expect(t, r, 200)
	entries, _ := r.json(t)["entry"].([]any)
	if len(entries) != 1 || entries[0].(map[string]any)["resource"].(map[string]any)["accessPolicy"].(map[string]any)["reference"] != policy {
		t.Fatalf("patient membership: %s", r.body)
	}

	t.Run("a patient of this project cannot join another", func(t *testing.T) {
		other, _ := project(t, "Other Clinic "+suffix)
		l, _ := registered(t, "Wanderer", "wanderer-"+suffix+"@example.com", "a long password", pid)
		refused(t, do(t, "POST", "auth/newpatient", "", "application/json", mustJSON(map[string]any{"login": l, "projectId": other})),
			"User must be scoped to the project")
	})
}

func TestRegistrationOff(t *testing.T) {
	ownStack(t, map[string]string{"PINION_REGISTER_ENABLED": "false"})
	r := do(t, "POST", "auth/newuser", "", "application/json", mustJSON(map[string]any{
		"firstName": "Shut", "lastName": "Out", "email": "shut-out@example.com", "password": "a long password"}))
	refused(t, r, "Registration is disabled")
}

var verifyLink = regexp.MustCompile(`verifyemail/([0-9a-f-]{36})/([0-9a-f]{64})`)

// Registration e-mails a verification link; POST /auth/verifyemail spends
// it; a project that requires a verified address lets the person in only
// after.
func TestVerifyEmailStory(t *testing.T) {
	email := "verify-" + uuid.NewString()[:8] + "@example.com"
	login, verifier := registered(t, "Vera", email, "a long password", "")
	r := do(t, "POST", "auth/newproject", "", "application/json", mustJSON(map[string]any{"login": login, "projectName": "Verified Clinic"}))
	expect(t, r, 200)
	tok := redeemCode(t, r.json(t), verifier)
	pid := strings.TrimPrefix(tok["project"].(map[string]any)["reference"].(string), "Project/")

	su := superToken(t)
	r = do(t, "GET", "fhir/R4/Project/"+pid, su, "", nil)
	expect(t, r, 200)
	p := r.json(t)
	p["setting"] = []any{map[string]any{"name": "requireVerifiedEmail", "valueBoolean": true}}
	expect(t, do(t, "PUT", "fhir/R4/Project/"+pid, su, "application/fhir+json", mustJSON(p)), 200)
	r = do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{"email": email, "password": "a long password"}))
	refused(t, r, "Email verification is required")

	m := verifyLink.FindStringSubmatch(mailTo(t, email))
	if m == nil {
		t.Fatal("no verification link in the e-mail")
	}
	wrong := do(t, "POST", "auth/verifyemail", "", "application/json", mustJSON(map[string]any{"id": m[1], "secret": strings.Repeat("0", 64)}))
	refused(t, wrong, "Incorrect secret")
	expect(t, do(t, "POST", "auth/verifyemail", "", "application/json", mustJSON(map[string]any{"id": m[1], "secret": m[2]})), 200)
	refused(t, do(t, "POST", "auth/verifyemail", "", "application/json", mustJSON(map[string]any{"id": m[1], "secret": m[2]})), "Already used")
	signIn(t, email, "a long password", "", "openid")
}
