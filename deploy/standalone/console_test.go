package standalone

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/pinion-health/pinion/pkg/config"
)

// tryGet is get that may fail (a page being replaced), bounded in time.
func tryGet[T any](ctx context.Context, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// consoleSignIn opens the console in a browser and signs in through the
// authorization page; it ends on the first console page.
func consoleSignIn(t *testing.T, email, password string) (ctx context.Context, consoleURL string) {
	t.Helper()
	// The console lives at the server's own base URL (its cookies and
	// redirects use it), not at the address the tests dial.
	consoleURL = config.DeriveBaseURL(stack.Addr) + "console"
	ctx = newBrowser(t)
	run(t, ctx, chromedp.Navigate(consoleURL), chromedp.WaitVisible(chromedp.ID("email")))
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("email"), email),
		chromedp.SendKeys(chromedp.ID("password"), password),
		chromedp.Click(chromedp.CSS("button")))
	// The sign-in page has an h1 too: wait until the browser is back on a
	// console page (which once failed CI, a screenshot taken mid-way).
	loc := ""
	if !waitUntil(10*time.Second, func() bool { loc, _ = tryGet(ctx, chromedp.Location()); return loc == consoleURL }) {
		t.Fatalf("signed in, the browser is at %s", loc)
	}
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS("h1")))
	return ctx, consoleURL
}

// The administration console, in a browser: an administrator signs in,
// manages the project's secrets, and removes a member (whose token then
// fails); a member who is not an administrator is refused; a form posted
// without its CSRF token is refused.
func TestConsoleInBrowser(t *testing.T) {
	parallelIn(t, browsers)
	pid, su := adminProject(t, "Console clinic")
	admin := "console-admin-" + pid + "@example.com"
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Connie", "lastName", "Sole",
		"email", admin, "password", "connie's password", "admin", true)
	patient := "console-patient-" + pid + "@example.com"
	member(t, su, pid, "resourceType", "Patient", "firstName", "Pat", "lastName", "Ient",
		"email", patient, "password", "pat's password")
	patTok := signIn(t, patient, "pat's password", pid, "openid")["access_token"].(string)
	expect(t, do(t, "GET", "auth/me", patTok, "", nil), 200)

	ctx, consoleURL := consoleSignIn(t, admin, "connie's password")
	shot(t, ctx, "console-project")
	if h1 := get(t, ctx, chromedp.Text(chromedp.CSS("h1"))); h1 != "Console clinic" {
		t.Fatalf("first page: %q: %s", h1, pageText(t, ctx))
	}

	// A secret: saved, listed by name, its value never shown whole.
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("name"), "LAB_KEY"),
		chromedp.SendKeys(chromedp.ID("value"), "s3cret-value-42"),
		chromedp.Click(chromedp.Search(`//button[contains(., "Add or replace secret")]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	text := pageText(t, ctx)
	if !strings.Contains(text, "The secret was saved.") || !strings.Contains(text, "LAB_KEY") || strings.Contains(text, "s3cret-value-42") {
		t.Fatalf("after saving a secret: %s", text)
	}
	r := do(t, "GET", "admin/projects/"+pid, su, "", nil)
	if !strings.Contains(string(r.body), "s3cret-value-42") {
		t.Fatalf("the secret was not stored: %s", r.body)
	}

	// Members, and the Remove User action with its confirmation.
	run(t, ctx, chromedp.Navigate(consoleURL+"/members"), chromedp.WaitVisible(chromedp.CSS("table")))
	shot(t, ctx, "console-members")
	if text := pageText(t, ctx); !strings.Contains(text, "Pat Ient") || !strings.Contains(text, "Connie Sole") {
		t.Fatalf("members: %s", text)
	}
	run(t, ctx, chromedp.Click(chromedp.Search(`//a[@aria-label="Remove Pat Ient"]`)), chromedp.WaitVisible(chromedp.CSS("button.danger")))
	shot(t, ctx, "console-remove")
	if text := pageText(t, ctx); !strings.Contains(text, "Remove Pat Ient") || !strings.Contains(text, "stay") {
		t.Fatalf("confirmation: %s", text)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS("button.danger")), chromedp.WaitVisible(chromedp.CSS(".notice")))
	if text := pageText(t, ctx); strings.Contains(text, "Pat Ient") || !strings.Contains(text, "The member was removed") {
		t.Fatalf("after removal: %s", text)
	}
	expect(t, do(t, "GET", "auth/me", patTok, "", nil), 401)

	// Invite a Practitioner under an access policy, then promote them.
	r = do(t, "POST", "fhir/R4/AccessPolicy", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "AccessPolicy", "name": "Front desk", "meta": map[string]any{"project": pid},
		"resource": []any{map[string]any{"resourceType": "Patient"}}}))
	expect(t, r, 201)
	policy := "AccessPolicy/" + r.json(t)["id"].(string)
	run(t, ctx, chromedp.Navigate(consoleURL+"/invite"), chromedp.WaitVisible(chromedp.ID("firstName")))
	shot(t, ctx, "console-invite")
	// A RelatedPerson without a patient: the service's refusal, beside the field.
	run(t, ctx,
		chromedp.SetValue(chromedp.ID("resourceType"), "RelatedPerson"),
		chromedp.SendKeys(chromedp.ID("firstName"), "Rel"),
		chromedp.SendKeys(chromedp.ID("lastName"), "Ative"),
		chromedp.SendKeys(chromedp.ID("email"), "console-rel-"+pid+"@example.com"),
		chromedp.Click(chromedp.Search(`//button[.="Invite"]`)),
		chromedp.WaitVisible(chromedp.ID("patient-error")))
	if text := get(t, ctx, chromedp.Text(chromedp.ID("patient-error"))); text != "patient is required to invite a RelatedPerson" {
		t.Fatalf("refusal beside the field: %q", text)
	}
	desk := "console-desk-" + pid + "@example.com"
	run(t, ctx,
		chromedp.SetValue(chromedp.ID("resourceType"), "Practitioner"),
		chromedp.SetValue(chromedp.ID("firstName"), "Desk"),
		chromedp.SetValue(chromedp.ID("lastName"), "Clerk"),
		chromedp.SetValue(chromedp.ID("email"), desk),
		chromedp.SetValue(chromedp.ID("policy"), policy),
		chromedp.Click(chromedp.Search(`//button[.="Invite"]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	if text := pageText(t, ctx); !strings.Contains(text, "The invitation was made.") || !strings.Contains(text, "Desk Clerk") {
		t.Fatalf("after the invite: %s", text)
	}
	r = do(t, "GET", "fhir/R4/ProjectMembership?_project="+pid+"&profile-type=Practitioner&_count=100", su, "", nil)
	var deskMembership map[string]any
	_, entries := bundleOf(t, r)
	for _, e := range entries {
		if e["profile"].(map[string]any)["display"] == "Desk Clerk" {
			deskMembership = e
		}
	}
	if deskMembership == nil || !strings.Contains(string(mustJSON(deskMembership)), policy) || deskMembership["admin"] == true {
		t.Fatalf("invited membership: %v", deskMembership)
	}
	// A Patient, with the same policy.
	run(t, ctx, chromedp.Navigate(consoleURL+"/invite"), chromedp.WaitVisible(chromedp.ID("firstName")))
	run(t, ctx,
		chromedp.SetValue(chromedp.ID("resourceType"), "Patient"),
		chromedp.SendKeys(chromedp.ID("firstName"), "Paula"),
		chromedp.SendKeys(chromedp.ID("lastName"), "Tient"),
		chromedp.SendKeys(chromedp.ID("email"), "console-paula-"+pid+"@example.com"),
		chromedp.SetValue(chromedp.ID("policy"), policy),
		chromedp.Click(chromedp.Search(`//input[@name="sendEmail"]`)),
		chromedp.Click(chromedp.Search(`//button[.="Invite"]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	r = do(t, "GET", "fhir/R4/ProjectMembership?_project="+pid+"&profile-type=Patient&_count=100", su, "", nil)
	if !strings.Contains(string(r.body), "Paula Tient") || strings.Count(string(r.body), policy) < 1 {
		t.Fatalf("the invited Patient: %s", r.body)
	}
	if text := pageText(t, ctx); !strings.Contains(text, "console-paula-"+pid+"@example.com") {
		t.Fatalf("the members table lacks the e-mail: %s", text)
	}
	run(t, ctx, chromedp.Click(chromedp.Search(`//a[.="Desk Clerk"]`)), chromedp.WaitVisible(chromedp.CSS(`input[name="admin"]`)))
	shot(t, ctx, "console-member")
	run(t, ctx, chromedp.Click(chromedp.CSS(`input[name="admin"]`)), chromedp.Click(chromedp.Search(`//button[.="Save"]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	r = do(t, "GET", "admin/projects/"+pid+"/members/"+deskMembership["id"].(string), su, "", nil)
	if r.json(t)["admin"] != true || !strings.Contains(string(r.body), policy) {
		t.Fatalf("after promotion: %s", r.body)
	}

	// An access policy, written in the editor; a mistake in its criteria
	// is shown beside them.
	run(t, ctx, chromedp.Navigate(consoleURL+"/policies/new"), chromedp.WaitVisible(chromedp.ID("name")))
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("name"), "Ward nurses"),
		chromedp.SendKeys(chromedp.Search(`//input[@aria-label="Resource type 0"]`), "Observation"),
		chromedp.SendKeys(chromedp.ID("criteria_0"), "Observation?colour=red"),
		chromedp.SendKeys(chromedp.Search(`//input[@aria-label="Resource type 1"]`), "Patient"),
		chromedp.SendKeys(chromedp.Search(`//input[@aria-label="Hidden fields 1"]`), "telecom, address"),
		chromedp.Click(chromedp.Search(`//button[.="Save access policy"]`)),
		chromedp.WaitVisible(chromedp.ID("criteria_0-error")))
	shot(t, ctx, "console-policy-error")
	if msg := get(t, ctx, chromedp.Text(chromedp.ID("criteria_0-error"))); msg != "Unknown search parameter in criteria: colour" {
		t.Fatalf("criteria error: %q", msg)
	}
	run(t, ctx,
		chromedp.SetValue(chromedp.ID("criteria_0"), "Observation?subject=%patient"),
		chromedp.Click(chromedp.Search(`//button[.="Save access policy"]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	run(t, ctx, chromedp.Click(chromedp.Search(`//a[.="Ward nurses"]`)), chromedp.WaitVisible(chromedp.ID("criteria_0")))
	if v := get(t, ctx, chromedp.Value(chromedp.ID("criteria_0"))); v != "Observation?subject=%patient" {
		t.Fatalf("the saved criteria: %q", v)
	}
	r = do(t, "GET", "fhir/R4/AccessPolicy?name=Ward&_project="+pid, su, "", nil)
	if _, e := bundleOf(t, r); len(e) != 1 || !strings.Contains(string(mustJSON(e[0])), `"hiddenFields":["telecom","address"]`) {
		t.Fatalf("the saved policy: %s", r.body)
	}

	// A client application: its secret shown once, and it works.
	run(t, ctx, chromedp.Navigate(consoleURL+"/clients"), chromedp.WaitVisible(chromedp.ID("name")))
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("name"), "Lab feed"),
		chromedp.SendKeys(chromedp.ID("redirectUris"), "not a url"),
		chromedp.Click(chromedp.Search(`//button[.="Create client application"]`)),
		chromedp.WaitVisible(chromedp.ID("redirectUris-error")))
	if text := get(t, ctx, chromedp.Text(chromedp.ID("redirectUris-error"))); !strings.Contains(text, "Invalid redirect URI") {
		t.Fatalf("a bad return address: %q", text)
	}
	run(t, ctx,
		chromedp.SetValue(chromedp.ID("redirectUris"), "https://lab.example/callback"),
		chromedp.Click(chromedp.Search(`//button[.="Create client application"]`)),
		chromedp.WaitVisible(chromedp.ID("secret")))
	shot(t, ctx, "console-client-secret")
	secret := get(t, ctx, chromedp.Value(chromedp.ID("secret")))
	clientID := get(t, ctx, chromedp.Text(chromedp.ID("client-id")))
	if tok := clientToken(t, clientID, secret); tok == "" {
		t.Fatal("the shown secret gives no token")
	}
	// Rotated: the new secret is shown, and works.
	run(t, ctx, chromedp.Click(chromedp.Search(`//button[.="Rotate the secret"]`)))
	// The page with the new secret replaces the one with the first.
	rotated := secret
	waitUntil(10*time.Second, func() bool {
		if v, err := tryGet(ctx, chromedp.Value(chromedp.ID("secret"))); err == nil {
			rotated = v
		}
		return rotated != secret
	})
	if rotated == secret || clientToken(t, clientID, rotated) == "" {
		t.Fatalf("rotation gave no new working secret: %q → %q: %s", secret, rotated, pageText(t, ctx))
	}
	r = do(t, "GET", "fhir/R4/ClientApplication/"+clientID, su, "", nil)
	if !strings.Contains(string(r.body), "https://lab.example/callback") {
		t.Fatalf("client: %s", r.body)
	}

	// A bot: written in TypeScript, refused with the line and column of a
	// mistake, deployed, run with JSON and with an HL7 message.
	run(t, ctx, chromedp.Navigate(consoleURL+"/bots"), chromedp.WaitVisible(chromedp.ID("name")))
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("name"), "Greeter"),
		chromedp.Click(chromedp.Search(`//button[.="Create bot"]`)),
		chromedp.WaitVisible(chromedp.ID("code")))
	if starter := get(t, ctx, chromedp.Value(chromedp.ID("code"))); !strings.Contains(starter, "export async function handler") {
		t.Fatalf("a new bot's source: %q", starter)
	}
	broken := "export async function handler(medplum: unknown, event: { input: unknown }): Promise<unknown> {\n  return { kind: typeof event.input, text: String(event.input) ;\n}\n"
	run(t, ctx,
		chromedp.SetValue(chromedp.ID("code"), broken),
		chromedp.Click(chromedp.Search(`//button[.="Save and deploy"]`)),
		chromedp.WaitVisible(chromedp.ID("code-error")))
	shot(t, ctx, "console-bot-error")
	if msg := get(t, ctx, chromedp.Text(chromedp.ID("code-error"))); !strings.Contains(msg, "Saved, not deployed") || !strings.Contains(msg, "line 2, column 64") {
		t.Fatalf("a syntax error: %q", msg)
	}
	fixed := strings.Replace(broken, "String(event.input) ;", "String(event.input) };", 1)
	run(t, ctx,
		chromedp.SetValue(chromedp.ID("code"), fixed),
		chromedp.Click(chromedp.Search(`//button[.="Save and deploy"]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	if text := pageText(t, ctx); !strings.Contains(text, "saved and deployed") {
		t.Fatalf("after deploying: %s", text)
	}
	run(t, ctx,
		chromedp.SetValue(chromedp.ID("input"), `{"hello":"world"}`),
		chromedp.Click(chromedp.Search(`//button[.="Run"]`)),
		chromedp.WaitVisible(chromedp.ID("output")))
	if out := get(t, ctx, chromedp.Text(chromedp.ID("output"))); !strings.Contains(out, `"kind":"object"`) {
		t.Fatalf("JSON run: %q", out)
	}
	run(t, ctx,
		chromedp.SetValue(chromedp.ID("contentType"), "x-application/hl7-v2+er7"),
		chromedp.SetValue(chromedp.ID("input"), "MSH|^~\\&|LAB|HOSP|APP|HOSP|20260101120000||ORU^R01|MSG1|P|2.5\nPID|1||12345||Doe^Jane"),
		chromedp.Click(chromedp.Search(`//button[.="Run"]`)))
	// The page with this run's output replaces the one with the last.
	out := ""
	waitUntil(10*time.Second, func() bool {
		// Between the pages there is no output to read: try again.
		if v, err := tryGet(ctx, chromedp.Text(chromedp.ID("output"))); err == nil {
			out = v
		}
		return strings.Contains(out, "Doe^Jane")
	})
	if !strings.Contains(out, "Doe^Jane") {
		t.Fatalf("HL7 run: %q", out)
	}
	shot(t, ctx, "console-bot-run")
	if text := pageText(t, ctx); strings.Count(text, "success") < 1 {
		t.Fatalf("no executions listed: %s", text)
	}

	// A form without its CSRF token, with the console's own cookie: refused.
	got, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{consoleURL}})
	if err != nil {
		t.Fatal(err)
	}
	var session string
	for _, c := range got.Cookies {
		if c.Name == "pinion_console" {
			session = c.Value
		}
	}
	if session == "" {
		t.Fatal("no console cookie")
	}
	req, _ := http.NewRequest("POST", base+"console/secrets", strings.NewReader(url.Values{"name": {"X"}, "value": {"y"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "pinion_console", Value: session})
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("a form without its CSRF token: %d", resp.StatusCode)
	}
	if r := do(t, "GET", "admin/projects/"+pid, su, "", nil); strings.Contains(string(r.body), `"X"`) {
		t.Fatalf("the forged form wrote: %s", r.body)
	}
	if resp.Header.Get("Content-Security-Policy") == "" || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("page headers: %v", resp.Header)
	}

	// A member who is not an administrator.
	plain := "console-plain-" + pid + "@example.com"
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Plain", "lastName", "Member",
		"email", plain, "password", "plain's password")
	ctx2, _ := consoleSignIn(t, plain, "plain's password")
	shot(t, ctx2, "console-not-admin")
	if h1 := get(t, ctx2, chromedp.Text(chromedp.CSS("h1"))); h1 != "Not an administrator" {
		t.Fatalf("a plain member: %q: %s", h1, pageText(t, ctx2))
	}
	for _, p := range []string{"/members", "/invite", "/policies", "/policies/new", "/clients", "/bots"} {
		run(t, ctx2, chromedp.Navigate(consoleURL+p), chromedp.WaitVisible(chromedp.CSS("h1")))
		if h1 := get(t, ctx2, chromedp.Text(chromedp.CSS("h1"))); h1 != "Not an administrator" {
			t.Fatalf("a plain member's %s: %q", p, h1)
		}
	}
	// They may still sign out, which ends their console token.
	got, err = chromedp.Call(ctx2, network.GetCookies, network.GetCookiesParams{URLs: []string{consoleURL}})
	if err != nil {
		t.Fatal(err)
	}
	plainToken := ""
	for _, c := range got.Cookies {
		if c.Name == "pinion_console" {
			plainToken = c.Value
		}
	}
	expect(t, do(t, "GET", "auth/me", plainToken, "", nil), 200)
	run(t, ctx2, chromedp.Click(chromedp.Search(`//button[.="Sign out"]`)))
	h1 := "Not an administrator"
	waitUntil(10*time.Second, func() bool {
		if v, err := tryGet(ctx2, chromedp.Text(chromedp.CSS("h1"))); err == nil {
			h1 = v
		}
		return h1 != "Not an administrator"
	})
	shot(t, ctx2, "console-signed-out")
	// The browser's sign-in ended with the console's: no question asked.
	if h1 != "Signed out" {
		t.Fatalf("after signing out: %q: %s", h1, pageText(t, ctx2))
	}
	expect(t, do(t, "GET", "auth/me", plainToken, "", nil), 401)
}
