package standalone

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The second factor in Chromium, on /oauth2/authorize's pages: a project
// that requires MFA has a member enrol after their password (the QR code
// and the key, a wrong code refused beside the field, then the recovery
// codes once); a later sign-in asks for a code, computed here; a recovery
// code does instead; an admin's reset has them enrol again.
func TestMFAInBrowser(t *testing.T) {
	parallelIn(t, browsers)
	pid, su := adminProject(t, "MFA browser clinic")
	r := do(t, "GET", "fhir/R4/Project/"+pid, su, "", nil)
	expect(t, r, 200)
	p := r.json(t)
	p["setting"] = []any{map[string]any{"name": "mfaRequired", "valueBoolean": true}}
	expect(t, do(t, "PUT", "fhir/R4/Project/"+pid, su, "application/fhir+json", mustJSON(p)), 200)
	dee := "dee-" + pid + "@example.com"
	r = do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Dee", "lastName", "Factor", "email", dee, "sendEmail", false, "password", "dee's password"))
	expect(t, r, 200)
	membership := r.json(t)["id"].(string)
	app := newTestApp(t)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "MFA app", "redirectUri": app.callback()}))
	expect(t, r, 201)
	clientID := r.json(t)["id"].(string)
	_, challenge := pkce("dee")
	start := func(state string) string {
		return base + "oauth2/authorize?response_type=code&client_id=" + clientID + "&redirect_uri=" + app.callback() +
			"&scope=openid&state=" + state + "&code_challenge=" + challenge + "&code_challenge_method=S256"
	}
	password := func(t *testing.T, ctx context.Context, state string) {
		t.Helper()
		run(t, ctx, chromedp.Navigate(start(state)), chromedp.WaitVisible(chromedp.ID("email")),
			chromedp.SendKeys(chromedp.ID("email"), dee),
			chromedp.SendKeys(chromedp.ID("password"), "dee's password"),
			chromedp.Click(chromedp.CSS("button")),
			chromedp.WaitVisible(chromedp.ID("mfa_code")))
	}
	enterCode := func(code string) chromedp.Action[chromedp.Void] {
		return chromedp.Steps(chromedp.SendKeys(chromedp.ID("mfa_code"), code), // each answer is a new page, its field empty
			chromedp.Click(chromedp.CSS("button")))
	}
	backWithCode := func(t *testing.T, ctx context.Context, state string) {
		t.Helper()
		if got := app.wait(t, ctx, state); got.Get("code") == "" {
			t.Fatalf("callback: %v", got)
		}
	}

	// The password, then enrolment: the QR code and the key.
	ctx := newBrowser(t)
	password(t, ctx, "enrol")
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`img[src^="data:image/png;base64,"]`)))
	shot(t, ctx, "mfa-enrol")
	key := get(t, ctx, chromedp.Text(chromedp.ID("mfa-key")))
	uri := "otpauth://totp/x?secret=" + strings.TrimSpace(key)
	run(t, ctx, enterCode("000000"), chromedp.WaitVisible(chromedp.ID("mfa-error")))
	// The enrolment step of a sign-in says what login-enroll says.
	if text := pageText(t, ctx); !strings.Contains(text, "Invalid MFA token") {
		t.Fatalf("wrong code: %s", text)
	}
	enrolled := time.Now()
	run(t, ctx, enterCode(totpCode(t, uri, enrolled)), chromedp.WaitVisible(chromedp.ID("recovery-codes")))
	shot(t, ctx, "mfa-recovery-codes")
	codes := strings.Fields(get(t, ctx, chromedp.Text(chromedp.ID("recovery-codes"))))
	if len(codes) != 10 {
		t.Fatalf("recovery codes: %v", codes)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS("button")), chromedp.WaitVisible(chromedp.CSS(`button[value="allow"]`)),
		chromedp.Click(chromedp.CSS(`button[value="allow"]`)))
	backWithCode(t, ctx, "enrol")

	// Another browser: the password, then a code; the enrolment's is spent.
	ctx = newBrowser(t)
	password(t, ctx, "code")
	shot(t, ctx, "mfa-code")
	run(t, ctx, enterCode(totpCode(t, uri, enrolled)), chromedp.WaitVisible(chromedp.ID("mfa-error")))
	if text := pageText(t, ctx); !strings.Contains(text, "Invalid MFA token") {
		t.Fatalf("spent code: %s", text)
	}
	run(t, ctx, enterCode(totpCode(t, uri, enrolled.Add(30*time.Second))))
	backWithCode(t, ctx, "code")

	// A lost device: a recovery code, once.
	ctx = newBrowser(t)
	password(t, ctx, "recovery")
	run(t, ctx, enterCode(codes[0]))
	backWithCode(t, ctx, "recovery")

	// The admin resets the factor: the next sign-in enrols again.
	expect(t, do(t, "POST", "admin/projects/"+pid+"/members/"+membership+"/$reset-mfa", su, "", nil), 200)
	ctx = newBrowser(t)
	password(t, ctx, "reset")
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`img[src^="data:image/png;base64,"]`)))
	if again := get(t, ctx, chromedp.Text(chromedp.ID("mfa-key"))); again == key {
		t.Fatal("the reset kept the secret")
	}
}
