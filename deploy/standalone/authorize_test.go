package standalone

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// testApp is an OAuth client on a loopback port: it records what the
// browser brings back to its redirect URI.
type testApp struct {
	srv  *httptest.Server
	mu   sync.Mutex
	last url.Values
}

func newTestApp(t *testing.T) *testApp {
	a := &testApp{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/cb" {
			http.NotFound(w, r) // the browser's favicon, say
			return
		}
		a.mu.Lock()
		a.last = r.URL.Query()
		a.mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<main>back in the app</main>"))
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *testApp) callback() string { return a.srv.URL + "/cb" }

// wait returns the callback that brought back this state, once the
// browser shows the app's page: a navigation started while that page is
// still loading can be aborted (net::ERR_ABORTED), which once failed CI.
func (a *testApp) wait(t *testing.T, ctx context.Context, state string) url.Values {
	t.Helper()
	var last url.Values
	eventually(t, 10*time.Second, "the app to get back state "+state, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		last = a.last
		return last.Get("state") == state
	})
	run(t, ctx, chromedp.WaitVisible(chromedp.Search(`//main[.="back in the app"]`)))
	return last
}

// projectChoice is a button of the page that asks which project: the
// sign-in page has a button.choice of its own (a passkey), so a wait on
// that class alone ended at once after the password's click, and the
// next navigation raced the form's (net::ERR_ABORTED, one run in three).
const projectChoice = `//form[input[@name="membership"]]/button`

// pkce is a verifier and its S256 challenge.
func pkce(seed string) (verifier, challenge string) {
	verifier = "verifier-" + seed + strings.Repeat("v", 40)
	d := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(d[:])
}

// The authorization code flow in a browser: an app that serves every
// project (registered by a super admin) sends the person to
// /oauth2/authorize; they sign in, choose one of their two projects,
// allow the app, and the app gets a code it exchanges, authenticated, for
// tokens of that project.
func TestAuthorizeInBrowser(t *testing.T) {
	parallelIn(t, browsers)
	pid, su := adminProject(t, "Authorize clinic")
	other, _ := adminProject(t, "Authorize lab")
	cy := "cy-" + pid + "@example.com" // a new person each run
	app := newTestApp(t)
	me := do(t, "GET", "auth/me", su, "", nil)
	expect(t, me, 200)
	operators := me.json(t)["project"].(map[string]any)["id"].(string)
	r := do(t, "POST", "admin/projects/"+operators+"/client", su, "application/json", mustJSON(map[string]any{"name": "Test app", "redirectUri": app.callback()}))
	expect(t, r, 201)
	clientID, secret := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	exchange := func(t *testing.T, code, verifier string) map[string]any {
		return exchangeAs(t, code, verifier, clientID, secret, app.callback())
	}
	for _, p := range []string{pid, other} {
		expect(t, do(t, "POST", "admin/projects/"+p+"/invite", su, "application/json",
			inviteBody("resourceType", "Practitioner", "firstName", "Cy", "lastName", "Twoprojects", "email", cy,
				"sendEmail", false, "password", "cy's password")), 200)
	}
	verifier, challenge := pkce("cy")
	start := func(extra ...string) string {
		q := url.Values{"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {app.callback()},
			"scope": {"openid"}, "state": {"st-123"}, "nonce": {"n-456"}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}}
		for i := 0; i+1 < len(extra); i += 2 {
			q.Set(extra[i], extra[i+1])
		}
		return base + "oauth2/authorize?" + q.Encode()
	}

	// An unknown redirect URI is shown on a page, never redirected to.
	resp, err := client.Get(start("redirect_uri", "https://evil.example/cb"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("Location") != "" {
		t.Fatalf("unknown redirect_uri: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	ctx := newBrowser(t)
	// prompt=none without a sign-in: back to the app with login_required and the state.
	run(t, ctx, chromedp.Navigate(start("prompt", "none", "state", "quiet")))
	if got := app.wait(t, ctx, "quiet"); got.Get("error") != "login_required" {
		t.Fatalf("prompt=none: %v: %s", got, pageText(t, ctx))
	}

	// A wrong password: the page says so, and nothing else.
	run(t, ctx, chromedp.Navigate(start()), chromedp.WaitVisible(chromedp.ID("email")))
	shot(t, ctx, "signin")
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("email"), cy),
		chromedp.SendKeys(chromedp.ID("password"), "not cy's password"),
		chromedp.Click(chromedp.CSS("button")),
		chromedp.WaitVisible(chromedp.ID("password-error")))
	shot(t, ctx, "signin-wrong-password")
	if text := pageText(t, ctx); !strings.Contains(text, "Email or password is invalid") {
		t.Fatalf("wrong password: %s", text)
	}

	// The right one: two projects, so a choice; the lab is chosen.
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("password"), "cy's password"),
		chromedp.Click(chromedp.CSS("button")),
		chromedp.WaitVisible(chromedp.Search(projectChoice)))
	shot(t, ctx, "choose-project")
	text := pageText(t, ctx)
	if !strings.Contains(text, "Authorize clinic") || !strings.Contains(text, "Authorize lab") {
		t.Fatalf("choice: %s", text)
	}
	run(t, ctx, chromedp.Click(chromedp.Search(`//button[contains(., "Authorize lab")]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[value="allow"]`)))
	// The first code for this app needs the person's consent.
	shot(t, ctx, "consent")
	if text := pageText(t, ctx); !strings.Contains(text, "Test app") || !strings.Contains(text, "know who you are") {
		t.Fatalf("consent: %s", text)
	}
	run(t, ctx, chromedp.Click(chromedp.CSS(`button[value="allow"]`)))
	got := app.wait(t, ctx, "st-123")
	if got.Get("state") != "st-123" || got.Get("code") == "" {
		t.Fatalf("callback: %v", got)
	}
	tok := exchange(t, got.Get("code"), verifier)
	me = do(t, "GET", "auth/me", tok["access_token"].(string), "", nil)
	expect(t, me, 200)
	if me.json(t)["project"].(map[string]any)["id"] != other {
		t.Fatalf("auth/me project: %s", me.body)
	}
	// The consent is in the audit trail: who allowed which client what.
	eventually(t, 15*time.Second, "the consent recorded", func() bool {
		for _, ev := range auditEvents(t, su, "consent-given", "entity", "ClientApplication/"+clientID) {
			if who, _, _ := agentOf(ev); strings.HasPrefix(who, "User/") {
				return true
			}
		}
		return false
	})
	if !strings.Contains(idTokenClaims(t, tok["id_token"].(string)), `"nonce":"n-456"`) {
		t.Fatal("the id_token lacks the nonce")
	}
	// Userinfo with the openid scope alone: who, and no more.
	r = do(t, "GET", "oauth2/userinfo", tok["access_token"].(string), "", nil)
	expect(t, r, 200)
	if info := r.json(t); info["sub"] == nil || !strings.HasPrefix(info["fhirUser"].(string), "Practitioner/") || info["email"] != nil {
		t.Fatalf("userinfo: %s", r.body)
	}

	// The code is spent; sent again, it ends the sign-in it made.
	form := url.Values{"grant_type": {"authorization_code"}, "code": {got.Get("code")}, "code_verifier": {verifier}}
	expect(t, do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode())), 400)

	// The browser is signed in: the next request asks no password.
	// More scopes than the person allowed: asked again.
	run(t, ctx, chromedp.Navigate(start("state", "second", "scope", "openid profile email")), chromedp.WaitVisible(chromedp.Search(projectChoice)))
	run(t, ctx, chromedp.Click(chromedp.Search(`//button[contains(., "Authorize lab")]`)),
		chromedp.WaitVisible(chromedp.CSS(`button[value="allow"]`)),
		chromedp.Click(chromedp.CSS(`button[value="allow"]`)))
	second := app.wait(t, ctx, "second")
	r = do(t, "GET", "oauth2/userinfo", exchange(t, second.Get("code"), verifier)["access_token"].(string), "", nil)
	expect(t, r, 200)
	if info := r.json(t); info["email"] != cy || info["name"] != "Cy Twoprojects" {
		t.Fatalf("userinfo with profile and email: %s", r.body)
	}
	// Signed in, but with two projects: prompt=none may show no page.
	run(t, ctx, chromedp.Navigate(start("prompt", "none", "state", "which")))
	if got := app.wait(t, ctx, "which"); got.Get("error") != "account_selection_required" {
		t.Fatalf("prompt=none with two projects: %v", got)
	}
	// prompt=login asks again.
	run(t, ctx, chromedp.Navigate(start("prompt", "login")), chromedp.WaitVisible(chromedp.ID("password")))

	// Another site's link to sign out, with nothing to prove that the
	// application asked (no id_token_hint): a page with a button. Until it
	// is pressed the browser stays signed in, and nothing is redirected to.
	run(t, ctx, chromedp.Navigate(base+"oauth2/logout?client_id="+clientID+"&state=bye&post_logout_redirect_uri="+url.QueryEscape(app.callback())),
		chromedp.WaitVisible(chromedp.CSS("main form button")))
	shot(t, ctx, "sign-out-confirm")
	if text := pageText(t, ctx); !strings.Contains(text, "Sign out of Pinion?") {
		t.Fatalf("sign-out: %s", text)
	}
	run(t, ctx, chromedp.Navigate(start("prompt", "none", "state", "still")))
	if got := app.wait(t, ctx, "still"); got.Get("error") != "account_selection_required" {
		t.Fatalf("after the sign-out page: %v", got)
	}
	run(t, ctx, chromedp.Navigate(base+"oauth2/logout"), chromedp.WaitVisible(chromedp.CSS("main form button")),
		chromedp.Click(chromedp.CSS("main form button")), chromedp.WaitVisible(chromedp.Search(`//h1[.="Signed out"]`)))
	shot(t, ctx, "signed-out")
	// The sign-in is over: the next request asks for the password. With the
	// application's ID token as its hint, signing out asks nothing and
	// returns to the address the application registered, with the state.
	run(t, ctx, chromedp.Navigate(start()), chromedp.WaitVisible(chromedp.ID("password")))
	run(t, ctx,
		chromedp.SendKeys(chromedp.ID("email"), cy),
		chromedp.SendKeys(chromedp.ID("password"), "cy's password"),
		chromedp.Click(chromedp.CSS("button")),
		chromedp.WaitVisible(chromedp.Search(projectChoice)))
	run(t, ctx, chromedp.Navigate(base+"oauth2/logout?id_token_hint="+url.QueryEscape(tok["id_token"].(string))+
		"&state=bye&post_logout_redirect_uri="+url.QueryEscape(app.callback())))
	app.wait(t, ctx, "bye")
	run(t, ctx, chromedp.Navigate(start("prompt", "none", "state", "after")))
	if got := app.wait(t, ctx, "after"); got.Get("error") != "login_required" {
		t.Fatalf("after sign-out: %v", got)
	}
}

// exchangeAs redeems a code with its verifier as the client it was issued
// to (client_secret_post), with the redirect URI of its request.
func exchangeAs(t *testing.T, code, verifier, clientID, secret, redirect string) map[string]any {
	t.Helper()
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier},
		"client_id": {clientID}, "client_secret": {secret}, "redirect_uri": {redirect}}
	r := do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 200)
	return r.json(t)
}

// idTokenClaims is a JWT's payload, as JSON text.
func idTokenClaims(t *testing.T, jwt string) string {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", jwt)
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The whole story: a project admin invites a person by e-mail; the person
// sets a password from the link in a browser, is added to a second
// project, and signs in to the first project's app.
func TestInvitationStoryInBrowser(t *testing.T) {
	parallelIn(t, browsers)
	pid, su := adminProject(t, "Story clinic")
	other, _ := adminProject(t, "Story lab")
	admin := projectAdmin(t, su, pid, "story-admin-"+pid+"@example.com")
	dee := "dee-" + pid + "@example.com" // a new person each run
	link := invitedLink(t, admin, pid, "Dee", dee)
	ctx := newBrowser(t)
	run(t, ctx, chromedp.Navigate(link), chromedp.WaitVisible(chromedp.ID("password")),
		submitPasswords("dee's password", "dee's password"), chromedp.WaitNotPresent(chromedp.ID("password")))
	expect(t, do(t, "POST", "admin/projects/"+other+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Dee", "lastName", "Browser", "email", dee, "sendEmail", false)), 200)

	app := newTestApp(t)
	r := do(t, "POST", "admin/projects/"+pid+"/client", admin, "application/json", mustJSON(map[string]any{"name": "Story app", "redirectUri": app.callback()}))
	expect(t, r, 201)
	clientID, secret := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	verifier, challenge := pkce("dee")
	q := url.Values{"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {app.callback()},
		"scope": {"openid"}, "state": {"story"}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}, "login_hint": {dee}}
	run(t, ctx, chromedp.Navigate(base+"oauth2/authorize?"+q.Encode()), chromedp.WaitVisible(chromedp.ID("password")),
		chromedp.SendKeys(chromedp.ID("password"), "dee's password"),
		chromedp.Click(chromedp.CSS("button")),
		// The project's own app: no choice of project (Dee's other project
		// is not the app's), only consent.
		chromedp.WaitVisible(chromedp.CSS(`button[value="allow"]`)),
		chromedp.Click(chromedp.CSS(`button[value="allow"]`)))
	tok := exchangeAs(t, app.wait(t, ctx, "story").Get("code"), verifier, clientID, secret, app.callback())
	me := do(t, "GET", "auth/me", tok["access_token"].(string), "", nil)
	expect(t, me, 200)
	body := me.json(t)
	if body["project"].(map[string]any)["id"] != pid || body["profile"].(map[string]any)["resourceType"] != "Practitioner" {
		t.Fatalf("auth/me: %s", me.body)
	}
}
