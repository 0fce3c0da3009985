package standalone

import (
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
)

// The registration pages in Chromium, desktop and phone: from an
// application's sign-in page to /register (a refusal beside its field,
// then an account), the verification e-mail's link, a sign-in from
// another browser, which offers to found a project and then returns to
// the application with a code.
func TestRegisterPagesInBrowser(t *testing.T) {
	su := superToken(t)
	app := newTestApp(t)
	// A client of a super-admin project may sign people in to any of their
	// projects, a new one included (a project's own client only to it).
	r := do(t, "POST", "fhir/R4/ClientApplication", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "ClientApplication", "name": "Register app", "redirectUri": app.callback()}))
	expect(t, r, 201)
	clientID := r.json(t)["id"].(string)
	_, challenge := pkce("register-pages")
	start := func(state string) string {
		return base + "oauth2/authorize?response_type=code&client_id=" + clientID + "&redirect_uri=" + url.QueryEscape(app.callback()) +
			"&scope=openid&state=" + state + "&code_challenge=" + challenge + "&code_challenge_method=S256"
	}
	email := "rpage-" + uuid.NewString()[:8] + "@example.com"
	const password = "a long registered passphrase"

	// The sign-in page links to registration, which keeps the request.
	ctx := newBrowser(t)
	run(t, ctx, chromedp.Navigate(start("register")), chromedp.WaitVisible(chromedp.ID("register")))
	shot(t, ctx, "signin-register-link")
	run(t, ctx, chromedp.Click(chromedp.ID("register")), chromedp.WaitVisible(chromedp.ID("firstName")))
	if loc := get(t, ctx, chromedp.Location()); !strings.Contains(loc, "/register?") || !strings.Contains(loc, "client_id="+clientID) {
		t.Fatalf("register page at %s", loc)
	}
	shot(t, ctx, "register")
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("firstName"), "Rhea"),
		chromedp.SendKeys(chromedp.ID("lastName"), "Paged"),
		chromedp.SendKeys(chromedp.ID("email"), email),
		chromedp.SendKeys(chromedp.ID("password"), "password"), // breached
		chromedp.Click(chromedp.CSS("button")),
		chromedp.WaitVisible(chromedp.ID("password-error")))
	if text := get(t, ctx, chromedp.Text(chromedp.ID("password-error"))); text != auth.BreachedText {
		t.Fatalf("breached password: %q", text)
	}
	shot(t, ctx, "register-refused")
	run(t, ctx, chromedp.SendKeys(chromedp.ID("password"), password), chromedp.Click(chromedp.CSS("button")),
		chromedp.WaitVisible(chromedp.ID("projectName")))
	if text := pageText(t, ctx); !strings.Contains(text, "We sent a link to "+email) {
		t.Fatalf("after registering: %s", text)
	}
	shot(t, ctx, "register-done")

	// The address is verified through the e-mail's link.
	m := verifyLink.FindString(mailTo(t, email))
	if m == "" {
		t.Fatal("no verification link in the e-mail")
	}
	run(t, ctx, chromedp.Navigate(base+m), chromedp.WaitVisible(chromedp.CSS("button")), chromedp.Click(chromedp.CSS("button")))
	waitText(t, ctx, "Your e-mail address is verified.")

	// Another browser signs in; with no project yet, the person founds one
	// and is back in the application with a code.
	ctx = newBrowser(t)
	run(t, ctx, chromedp.Navigate(start("founded")), chromedp.WaitVisible(chromedp.ID("email")),
		chromedp.SendKeys(chromedp.ID("email"), email),
		chromedp.SendKeys(chromedp.ID("password"), password),
		chromedp.Click(chromedp.CSS("button")),
		chromedp.WaitVisible(chromedp.ID("projectName")))
	shot(t, ctx, "register-project")
	run(t, ctx, chromedp.SendKeys(chromedp.ID("projectName"), "Pag"), chromedp.Click(chromedp.CSS("button")),
		chromedp.WaitVisible(chromedp.ID("projectName-error")))
	run(t, ctx, chromedp.SetValue(chromedp.ID("projectName"), "Paged Clinic"), chromedp.Click(chromedp.CSS("button")),
		chromedp.WaitVisible(chromedp.CSS(`button[value="allow"]`)), chromedp.Click(chromedp.CSS(`button[value="allow"]`)))
	if got := app.wait(t, ctx, "founded"); got.Get("code") == "" {
		t.Fatalf("callback: %v", got)
	}

	// The founder is the new project's admin, with a verified address.
	tok := signIn(t, email, password, "", "openid")
	admin := tok["access_token"].(string)
	pid := strings.TrimPrefix(tok["project"].(map[string]any)["reference"].(string), "Project/")
	r = do(t, "GET", "fhir/R4/Project/"+pid, admin, "", nil)
	expect(t, r, 200)
	if r.json(t)["name"] != "Paged Clinic" {
		t.Fatalf("project: %s", r.body)
	}
	r = do(t, "GET", "auth/me", admin, "", nil)
	expect(t, r, 200)
	me := r.json(t)
	if me["membership"].(map[string]any)["admin"] != true {
		t.Fatalf("me: %s", r.body)
	}
	r = do(t, "GET", "fhir/R4/User/"+me["user"].(map[string]any)["id"].(string), su, "", nil)
	expect(t, r, 200)
	if r.json(t)["emailVerified"] != true {
		t.Fatalf("user: %s", r.body)
	}
}

// A project's patient sign-up page: refused until the project's admin
// sets a default patient policy (which they may now do themselves), then
// a patient signs up in Chromium, lands under that policy, and reads
// themself but no other patient.
func TestPatientSignUpPageInBrowser(t *testing.T) {
	suffix := uuid.NewString()[:8]
	login, verifier := registered(t, "Owner", "owner-"+suffix+"@example.com", "a long password", "")
	r := do(t, "POST", "auth/newproject", "", "application/json", mustJSON(map[string]any{"login": login, "projectName": "Sign-up Clinic"}))
	expect(t, r, 200)
	tok := redeemCode(t, r.json(t), verifier)
	admin := tok["access_token"].(string)
	pid := strings.TrimPrefix(tok["project"].(map[string]any)["reference"].(string), "Project/")
	page := base + "register/patient/" + pid

	ctx := newBrowser(t)
	run(t, ctx, chromedp.Navigate(page))
	waitText(t, ctx, "Project does not allow open registration")

	r = do(t, "POST", "fhir/R4/AccessPolicy", admin, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "patients",
		"resource": []any{map[string]any{"resourceType": "Patient", "criteria": "Patient?_id=%patient.id"}}}))
	expect(t, r, 201)
	policy := "AccessPolicy/" + r.json(t)["id"].(string)
	r = do(t, "GET", "fhir/R4/Project/"+pid, admin, "", nil)
	expect(t, r, 200)
	p := r.json(t)
	p["defaultPatientAccessPolicy"] = map[string]any{"reference": policy}
	expect(t, do(t, "PUT", "fhir/R4/Project/"+pid, admin, "application/fhir+json", mustJSON(p)), 200)
	// What the server grants the project is not the admin's to change.
	p["features"] = []any{"bots", "cron"}
	r = do(t, "PUT", "fhir/R4/Project/"+pid, admin, "application/fhir+json", mustJSON(p))
	expect(t, r, 403)

	other := do(t, "POST", "fhir/R4/Patient", admin, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "Patient", "name": []any{map[string]any{"family": "Someone-Else"}}}))
	expect(t, other, 201)
	otherID := other.json(t)["id"].(string)

	email := "signup-" + suffix + "@example.com"
	run(t, ctx, chromedp.Navigate(page), chromedp.WaitVisible(chromedp.ID("firstName")))
	if text := pageText(t, ctx); !strings.Contains(text, "Sign up to Sign-up Clinic") {
		t.Fatalf("page: %s", text)
	}
	shot(t, ctx, "register-patient")
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("firstName"), "Pia"),
		chromedp.SendKeys(chromedp.ID("lastName"), "Patient"),
		chromedp.SendKeys(chromedp.ID("email"), email),
		chromedp.SendKeys(chromedp.ID("password"), "a long password"),
		chromedp.Click(chromedp.CSS("button")))
	waitText(t, ctx, "You are signed up as a patient of this project.")
	shot(t, ctx, "register-patient-done")

	ptok := signIn(t, email, "a long password", pid, "openid")
	patient := ptok["access_token"].(string)
	self, _ := ptok["patient"].(string)
	if self == "" {
		t.Fatalf("patient tokens: %v", ptok)
	}
	expect(t, do(t, "GET", "fhir/R4/Patient/"+self, patient, "", nil), 200)
	if r := do(t, "GET", "fhir/R4/Patient/"+otherID, patient, "", nil); r.status != 403 && r.status != 404 {
		t.Fatalf("another patient: %d %s", r.status, r.body)
	}
	r = do(t, "GET", "fhir/R4/ProjectMembership?profile=Patient/"+self, admin, "", nil)
	expect(t, r, 200)
	entries, _ := r.json(t)["entry"].([]any)
	if len(entries) != 1 || entries[0].(map[string]any)["resource"].(map[string]any)["accessPolicy"].(map[string]any)["reference"] != policy {
		t.Fatalf("patient membership: %s", r.body)
	}
}

// With registration off the sign-in page has no link, and every
// registration page refuses.
func TestRegisterPagesOff(t *testing.T) {
	ownStack(t, map[string]string{"PINION_REGISTER_ENABLED": "false"})
	app := newTestApp(t)
	r := do(t, "POST", "fhir/R4/ClientApplication", superToken(t), "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "ClientApplication", "name": "Closed app", "redirectUri": app.callback()}))
	expect(t, r, 201)
	_, challenge := pkce("register-off")
	ctx := newBrowser(t)
	run(t, ctx, chromedp.Navigate(base+"oauth2/authorize?response_type=code&client_id="+r.json(t)["id"].(string)+
		"&redirect_uri="+url.QueryEscape(app.callback())+"&scope=openid&code_challenge="+challenge+"&code_challenge_method=S256"),
		chromedp.WaitVisible(chromedp.ID("email")))
	if html := get(t, ctx, chromedp.OuterHTML("html")); strings.Contains(html, "/register") {
		t.Fatalf("the sign-in page links to registration: %s", html)
	}
	run(t, ctx, chromedp.Navigate(base+"register"))
	waitText(t, ctx, "Registration is disabled")
	for _, path := range []string{"register", "register/patient/" + uuid.NewString(), "register/project"} {
		for _, method := range []string{"GET", "POST"} {
			r := do(t, method, path, "", "application/x-www-form-urlencoded", []byte("firstName=A"))
			if r.status != 403 || !strings.Contains(string(r.body), "Registration is disabled") {
				t.Errorf("%s %s: %d %s", method, path, r.status, r.body)
			}
		}
	}
}
