package identity

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html"
	"maps"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/identity/limits"
	"github.com/pinion-health/pinion/services/identity/web"
)

// Logging out what holds no session (HTTP Basic has no token) succeeds
// without a write; nobody signed in gets the signed-out page.
func TestLogoutWithoutSession(t *testing.T) {
	s := unwired(t)
	resp, err := s.signins.Logout(context.Background(), &bus.Request{Method: "POST", Header: map[string]string{},
		Principal: &bus.Principal{User: "ClientApplication/c1", LoginID: "l1"}})
	if err != nil || resp.Status != 200 || resp.Header[bus.SessionHeader] != "" || !strings.Contains(string(resp.Body), `"id":"ok"`) {
		t.Fatalf("%v %v", resp, err)
	}
	resp, err = s.signins.Logout(context.Background(), &bus.Request{Method: "GET", Header: map[string]string{}})
	if err != nil || resp.Status != 200 || !strings.Contains(string(resp.Body), "Signed out") {
		t.Fatalf("%v %v", resp, err)
	}
}

// webApp is a registered client of a project that returns to one address,
// with the authorization request it starts.
type webApp struct {
	id, secret, project string
	params              url.Values
}

const webCallback = "https://app.example/cb"

func newWebApp(t *testing.T, project string) webApp {
	t.Helper()
	id, secret := newClient(t, project, map[string]any{"name": "Web app", "redirectUris": []any{webCallback}})
	return webApp{id: id, secret: secret, project: project, params: url.Values{"response_type": {"code"}, "client_id": {id}, "redirect_uri": {webCallback},
		"state": {"s1"}, "nonce": {"n1"}, "code_challenge": {rfcChallenge}, "code_challenge_method": {"S256"}}}
}

// get starts the request in the browser with this cookie header, with
// parameters changed.
func (a webApp) get(t *testing.T, header map[string]string, kv ...string) *bus.Response {
	t.Helper()
	q := maps.Clone(a.params)
	for i := 0; i < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	resp, err := live.svc.signins.Authorize(context.Background(), &bus.Request{Method: "GET", Query: q, Header: header, Remote: "10.5.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// post posts the request's parameters and these fields from the browser.
func (a webApp) post(t *testing.T, header map[string]string, remote string, kv ...string) *bus.Response {
	t.Helper()
	form := maps.Clone(a.params)
	for i := 0; i < len(kv); i += 2 {
		form.Set(kv[i], kv[i+1])
	}
	r := formRequest(form, header)
	r.Remote = remote
	resp, err := live.svc.signins.Authorize(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// allow answers a consent page by allowing, from the browser it was shown
// to, and returns the answer to that.
// The form carries the page's hidden fields, and only those.
func (a webApp) allow(t *testing.T, page *bus.Response, remote string) *bus.Response {
	t.Helper()
	expectPage(t, page, 200, "asks to act for you")
	form := url.Values{"consent": {"allow"}}
	for _, m := range hiddenField.FindAllSubmatch(page.Body, -1) {
		form.Set(string(m[1]), html.UnescapeString(string(m[2])))
	}
	r := formRequest(form, map[string]string{"Cookie": strings.Split(page.Header["Set-Cookie"], ";")[0]})
	r.Remote = remote
	resp, err := live.svc.signins.Authorize(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

var hiddenField = regexp.MustCompile(`<input type="hidden" name="([^"]*)" value="([^"]*)">`)

// returned checks a redirect to the client and returns its parameters.
func returned(t *testing.T, resp *bus.Response) url.Values {
	t.Helper()
	loc, ok := strings.CutPrefix(resp.Header["Location"], webCallback+"?")
	if resp.Status != 302 || !ok {
		t.Fatalf("%d %v:\n%s", resp.Status, resp.Header, resp.Body)
	}
	q, err := url.ParseQuery(loc)
	if err != nil || q.Get("state") != "s1" {
		t.Fatalf("redirect %q", loc)
	}
	return q
}

// expectPage checks a page's status and that it says text.
func expectPage(t *testing.T, resp *bus.Response, status int, text string) {
	t.Helper()
	if resp.Status != status || !strings.Contains(string(resp.Body), text) {
		t.Fatalf("%d, want %d with %q:\n%s", resp.Status, status, text, resp.Body)
	}
}

// Signing in in a browser: the password page, then back to the client
// with a code, and a sign-in the browser keeps under a new id.
func TestBrowserSignIn(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "browser")
	app := newWebApp(t, p.project)
	b, csrf, header := aBrowser(t)

	page := app.post(t, header, "10.5.1.1", "csrf", csrf, "email", p.email, "password", "not the password")
	expectPage(t, page, 400, "Email or password is invalid")
	if csp := page.Header["Content-Security-Policy"]; !strings.Contains(csp, "form-action 'self' https://app.example;") {
		t.Fatalf("CSP %q", csp)
	}
	expectPage(t, app.post(t, header, "10.5.1.1", "csrf", csrf, "email", "nobody", "password", p.password), 400, "Valid email address is required")

	resp := app.allow(t, app.post(t, header, "10.5.1.1", "csrf", csrf, "email", " "+strings.ToUpper(p.email), "password", p.password), "10.5.1.1")
	q := returned(t, resp)
	cookie := resp.Header["Set-Cookie"]
	nb := web.BrowserOf(&bus.Request{Header: map[string]string{"Cookie": strings.Split(cookie, ";")[0]}})
	if nb.IsNew || nb.ID == b.ID {
		t.Fatalf("the sign-in kept the browser's id: %q", cookie)
	}
	if bs, err := live.svc.signins.SignedIn(ctx, b); err != nil || bs != nil {
		t.Fatalf("the old id is signed in: %+v %v", bs, err)
	}
	bs, err := live.svc.signins.SignedIn(ctx, nb)
	if err != nil || bs == nil || bs.User != p.user {
		t.Fatalf("the new id is not signed in: %+v %v", bs, err)
	}
	body := decoded(t, token(t, url.Values{"grant_type": {"authorization_code"}, "code": {q.Get("code")}, "code_verifier": {rfcVerifier},
		"client_id": {app.id}, "client_secret": {app.secret}, "redirect_uri": {webCallback}}, nil), nil, 200)
	if c := verify(t, body["id_token"].(string), app.id); c.Nonce != "n1" || c.FHIRUser != p.profile {
		t.Fatalf("id token %+v", c)
	}

	// Signed in and consented: back at once, unless the client asks for
	// the password.
	signedIn := map[string]string{"Cookie": web.Cookie + "=" + nb.ID}
	again := returned(t, app.get(t, signedIn))
	if again.Get("code") == "" || again.Get("code") == q.Get("code") {
		t.Fatalf("no new code: %v", again)
	}
	expectPage(t, app.get(t, signedIn, "prompt", "login"), 200, `type="password"`)

	// A password change ends the browser's sign-in too.
	if _, err := live.conns.Sessions.EndSessions(ctx, p.user); err != nil {
		t.Fatal(err)
	}
	expectPage(t, app.get(t, signedIn), 200, `type="password"`)
	if got := returned(t, app.get(t, signedIn, "prompt", "none")); got.Get("error") != "login_required" {
		t.Fatalf("prompt=none: %v", got)
	}
}

// A project's own user signs in to that project's client.
func TestBrowserSignInProjectUser(t *testing.T) {
	project := newProject(t, "Own users")
	email := newEmail("own")
	user := newUser(t, email, "own password", project)
	newMembership(t, project, "User/"+user, newPractitioner(t, project, "O", "Wn"), nil)
	app := newWebApp(t, project)
	_, csrf, header := aBrowser(t)
	if q := returned(t, app.allow(t, app.post(t, header, "10.5.2.1", "csrf", csrf, "email", email, "password", "own password"), "10.5.2.1")); q.Get("code") == "" {
		t.Fatalf("redirect %v", q)
	}
}

// Several memberships: a client that serves every project (here, one
// registered in a super-admin project) lets the person choose one on a
// page, which posts back.
func TestBrowserChooseProject(t *testing.T) {
	p := newPerson(t, "chooser")
	other := newProject(t, "Other clinic")
	second := newMembership(t, other, p.user, p.profile, nil)
	app := newWebApp(t, newSuperAdminProject(t))
	_, csrf, header := aBrowser(t)

	resp := app.post(t, header, "10.5.3.1", "csrf", csrf, "email", p.email, "password", p.password)
	expectPage(t, resp, 200, "Which one should Web app use?")
	cookie := strings.Split(resp.Header["Set-Cookie"], ";")[0]
	nb := web.BrowserOf(&bus.Request{Header: map[string]string{"Cookie": cookie}})
	token, err := live.svc.pages.CSRFToken(context.Background(), nb)
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []string{`name="membership" value="` + p.membership + `"`, `name="membership" value="` + second + `"`,
		`value="` + token + `"`, "Project " + other[:4]} {
		if !strings.Contains(string(resp.Body), part) {
			t.Fatalf("no %q on the page:\n%s", part, resp.Body)
		}
	}
	signedIn := map[string]string{"Cookie": cookie}
	if q := returned(t, app.get(t, signedIn, "prompt", "none")); q.Get("error") != "account_selection_required" {
		t.Fatalf("prompt=none: %v", q)
	}
	q := returned(t, app.allow(t, app.post(t, signedIn, "10.5.3.1", "csrf", token, "membership", second), "10.5.3.1"))
	loginID, _, _ := strings.Cut(q.Get("code"), ".")
	if l, err := live.conns.Sessions.GetLogin(context.Background(), loginID); err != nil || l.Membership != second || l.Client != app.id {
		t.Fatalf("login %+v %v", l, err)
	}
	// A membership not the person's is asked again.
	expectPage(t, app.post(t, signedIn, "10.5.3.1", "csrf", token, "membership", uuid.NewString()), 200, "Which one should Web app use?")
}

// newSuperAdminProject stores a project marked superAdmin, whose clients
// serve every project, and returns its id.
func newSuperAdminProject(t *testing.T) string {
	t.Helper()
	id := newProject(t, "Operators")
	ctx := context.Background()
	res, err := live.conns.Repo.Read(ctx, repo.AllProjects, "Project", id)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := res.Decode()
	doc["superAdmin"] = true
	if _, err := live.conns.Repo.Update(ctx, repo.AllProjects, doc, repo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return id
}

// The takeover issue 28 names: a member of project B registers a client
// in B; a person signed in to project A opens the client's link. The
// client gets no code for A: not at once, not with prompt=none, not by
// naming A's membership; a person in both gets B's membership only.
func TestAuthorizeOnlyTheClientsProject(t *testing.T) {
	victim := newPerson(t, "victim")
	attackers := newProject(t, "Attackers")
	evil := newWebApp(t, attackers)
	_, csrf, header := aBrowser(t)

	resp := evil.post(t, header, "10.5.6.1", "csrf", csrf, "email", victim.email, "password", victim.password)
	q := returned(t, resp)
	if q.Get("code") != "" || q.Get("error") != "access_denied" {
		t.Fatalf("the other project's client got %v", q)
	}
	signedIn := map[string]string{"Cookie": strings.Split(resp.Header["Set-Cookie"], ";")[0]}
	for _, prompt := range []string{"", "none", "consent"} {
		if q := returned(t, evil.get(t, signedIn, "prompt", prompt)); q.Get("code") != "" || q.Get("error") != "access_denied" {
			t.Fatalf("prompt=%q: %v", prompt, q)
		}
	}
	nb := web.BrowserOf(&bus.Request{Header: signedIn})
	token, _ := live.svc.pages.CSRFToken(context.Background(), nb)
	forced := evil.post(t, signedIn, "10.5.6.1", "csrf", token, "membership", victim.membership, "consent", "allow")
	if q := returned(t, forced); q.Get("code") != "" {
		t.Fatalf("naming the victim's membership gave a code: %v", q)
	}

	// In both projects: the client's project only, and only after consent.
	inB := newMembership(t, attackers, victim.user, victim.profile, nil)
	if q := returned(t, evil.get(t, signedIn, "prompt", "none")); q.Get("error") != "consent_required" {
		t.Fatalf("prompt=none before consent: %v", q)
	}
	page := evil.get(t, signedIn)
	if strings.Contains(string(page.Body), victim.membership) {
		t.Fatalf("the consent page offers project A:\n%s", page.Body)
	}
	q = returned(t, evil.allow(t, page, "10.5.6.1"))
	loginID, _, _ := strings.Cut(q.Get("code"), ".")
	if l, err := live.conns.Sessions.GetLogin(context.Background(), loginID); err != nil || l.Membership != inB {
		t.Fatalf("login %+v %v", l, err)
	}
}

// Consent is asked once per person and client and scope, remembered,
// asked again for a wider scope or prompt=consent, and withdrawn.
func TestBrowserConsent(t *testing.T) {
	ctx := context.Background()
	p := newPerson(t, "consenter")
	app := newWebApp(t, p.project)
	_, csrf, header := aBrowser(t)
	page := app.post(t, header, "10.5.7.1", "csrf", csrf, "email", p.email, "password", p.password)
	for _, part := range []string{"Web app", "asks to act for you", "know who you are", `value="allow"`, `value="deny"`} {
		expectPage(t, page, 200, part)
	}
	signedIn := map[string]string{"Cookie": strings.Split(page.Header["Set-Cookie"], ";")[0]}
	nb := web.BrowserOf(&bus.Request{Header: signedIn})
	pageCSRF, _ := live.svc.pages.CSRFToken(ctx, nb)

	// No: back to the client with access_denied, and nothing remembered.
	denied := returned(t, app.post(t, signedIn, "10.5.7.1", "csrf", pageCSRF, "membership", p.membership, "consent", "deny"))
	if denied.Get("error") != "access_denied" || denied.Get("code") != "" {
		t.Fatalf("denied: %v", denied)
	}
	// A consent posted without the page's CSRF token is not taken.
	expectPage(t, app.post(t, signedIn, "10.5.7.1", "csrf", "forged", "membership", p.membership, "consent", "allow"), 403, "Form expired")
	if q := returned(t, app.get(t, signedIn, "prompt", "none")); q.Get("error") != "consent_required" {
		t.Fatalf("prompt=none after a no: %v", q)
	}

	// Yes, with offline access: a code; then remembered.
	wide := app.get(t, signedIn, "scope", "openid offline_access")
	expectPage(t, wide, 200, "keep access while you are away")
	q := returned(t, app.post(t, signedIn, "10.5.7.1", "csrf", pageCSRF, "membership", p.membership, "consent", "allow", "scope", "openid offline_access"))
	body := decoded(t, token4(t, app, q.Get("code")), nil, 200)
	refresh, _ := body["refresh_token"].(string)
	if refresh == "" {
		t.Fatalf("no refresh token: %v", body)
	}
	if q := returned(t, app.get(t, signedIn, "prompt", "none")); q.Get("code") == "" {
		t.Fatalf("a consented client asked again: %v", q)
	}
	expectPage(t, app.get(t, signedIn, "prompt", "consent"), 200, "asks to act for you")
	expectPage(t, app.get(t, signedIn, "scope", "openid email"), 200, "see your e-mail address")

	// Listed, then withdrawn: the refresh token stops and the page returns.
	me := &bus.Principal{User: p.user}
	list := decoded(t, must(live.svc.consents.List(ctx, &bus.Request{Principal: me})), nil, 200)
	if cs, _ := list["consents"].([]any); len(cs) != 1 || cs[0].(map[string]any)["client"] != app.id {
		t.Fatalf("consents %v", list)
	}
	withdraw := &bus.Request{Method: "DELETE", Principal: me, Params: map[string]string{"clientId": app.id}}
	if resp, err := live.svc.consents.Withdraw(ctx, withdraw); err != nil || resp.Status != 200 {
		t.Fatalf("withdraw: %v %v", resp, err)
	}
	if _, err := live.svc.consents.Withdraw(ctx, withdraw); !errors.Is(err, fhir.ErrNotFound) {
		t.Fatalf("withdrawing twice: %v", err)
	}
	refused := decoded(t, token(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh},
		"client_id": {app.id}, "client_secret": {app.secret}}, nil), nil, 400)
	if refused["error"] != "invalid_grant" {
		t.Fatalf("refresh after withdrawal: %v", refused)
	}
	if q := returned(t, app.get(t, signedIn, "prompt", "none")); q.Get("error") != "consent_required" {
		t.Fatalf("prompt=none after withdrawal: %v", q)
	}
}

func must(resp *bus.Response, err error) *bus.Response {
	if err != nil {
		panic(err)
	}
	return resp
}

// token4 redeems a code of the web app as the app: its secret, its
// redirect URI, RFC 7636's verifier.
func token4(t *testing.T, app webApp, code string) *bus.Response {
	t.Helper()
	return token(t, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {rfcVerifier},
		"redirect_uri": {webCallback}}, map[string]string{"Authorization": basicAuth(app.id, app.secret)})
}

// basicAuth is an HTTP Basic header with each half form-encoded (RFC 6749 §2.3.1).
func basicAuth(id, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(id)+":"+url.QueryEscape(secret)))
}

// A code is redeemed only by the client it was issued to, authenticated,
// with the redirect URI of its request (RFC 6749 §4.1.3).
func TestCodeBoundToItsClient(t *testing.T) {
	p := newPerson(t, "bound")
	app := newWebApp(t, p.project)
	other := newWebApp(t, p.project)
	_, csrf, header := aBrowser(t)
	signedIn := app.allow(t, app.post(t, header, "10.5.8.1", "csrf", csrf, "email", p.email, "password", p.password), "10.5.8.1")
	cookie := map[string]string{"Cookie": strings.Split(signedIn.Header["Set-Cookie"], ";")[0]}
	code := func() string { return returned(t, app.get(t, cookie)).Get("code") }
	grant := func(code string, extra url.Values, header map[string]string) map[string]any {
		f := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {rfcVerifier}}
		for k, v := range extra {
			f[k] = v
		}
		resp := token(t, f, header)
		var out map[string]any
		_ = json.Unmarshal(resp.Body, &out)
		out["status"] = float64(resp.Status)
		return out
	}
	cb := url.Values{"redirect_uri": {webCallback}}
	cases := []struct {
		name   string
		extra  url.Values
		header map[string]string
		status float64
		error  string
	}{
		{"no client authentication", url.Values{"client_id": {app.id}, "redirect_uri": {webCallback}}, nil, 401, "invalid_client"},
		{"no client at all", cb, nil, 401, "invalid_client"},
		{"a wrong secret", url.Values{"client_id": {app.id}, "client_secret": {"wrong-" + app.secret}, "redirect_uri": {webCallback}}, nil, 401, "invalid_client"},
		{"another client's credentials", cb, map[string]string{"Authorization": basicAuth(other.id, other.secret)}, 400, "invalid_grant"},
		{"another redirect_uri", url.Values{"redirect_uri": {webCallback + "2"}}, map[string]string{"Authorization": basicAuth(app.id, app.secret)}, 400, "invalid_grant"},
		{"no redirect_uri", nil, map[string]string{"Authorization": basicAuth(app.id, app.secret)}, 400, "invalid_grant"},
		{"two different secrets", url.Values{"client_secret": {"wrong-" + app.secret}, "redirect_uri": {webCallback}}, map[string]string{"Authorization": basicAuth(app.id, app.secret)}, 400, "invalid_request"},
		{"the same secret twice (Medplum's client may)", url.Values{"client_secret": {app.secret}, "redirect_uri": {webCallback}}, map[string]string{"Authorization": basicAuth(app.id, app.secret)}, 200, ""},
		{"client_secret_post", url.Values{"client_id": {app.id}, "client_secret": {app.secret}, "redirect_uri": {webCallback}}, nil, 200, ""},
		{"client_secret_basic", cb, map[string]string{"Authorization": basicAuth(app.id, app.secret)}, 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := code()
			got := grant(c, tc.extra, tc.header)
			if got["status"] != tc.status || (tc.error != "" && got["error"] != tc.error) {
				t.Fatalf("%v, want %v %s", got, tc.status, tc.error)
			}
			if tc.status != 200 {
				// A refused request leaves the code to its client.
				if ok := grant(c, cb, map[string]string{"Authorization": basicAuth(app.id, app.secret)}); ok["status"] != float64(200) {
					t.Fatalf("the refused request spent the code: %v", ok)
				}
			}
		})
	}

	// A refresh token too is its client's (RFC 6749 §6).
	q := returned(t, app.allow(t, app.get(t, cookie, "scope", "openid offline_access"), "10.5.8.2"))
	refresh, _ := decoded(t, token4(t, app, q.Get("code")), nil, 200)["refresh_token"].(string)
	renew := func(header map[string]string, extra ...string) *bus.Response {
		f := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}
		for i := 0; i < len(extra); i += 2 {
			f.Set(extra[i], extra[i+1])
		}
		return token(t, f, header)
	}
	if got := decoded(t, renew(map[string]string{"Authorization": basicAuth(other.id, other.secret)}), nil, 400); got["error"] != "invalid_grant" {
		t.Fatalf("another client's refresh: %v", got)
	}
	if got := decoded(t, renew(nil, "client_id", app.id), nil, 401); got["error"] != "invalid_client" {
		t.Fatalf("a refresh without the secret: %v", got)
	}
	if got := decoded(t, renew(nil), nil, 401); got["error"] != "invalid_client" {
		t.Fatalf("a refresh naming no client: %v", got)
	}
	decoded(t, renew(map[string]string{"Authorization": basicAuth(app.id, app.secret)}), nil, 200)
}

// Who is sent back to the client with access_denied.
func TestBrowserAccessDenied(t *testing.T) {
	t.Run("no membership", func(t *testing.T) {
		project := newProject(t, "Empty")
		email := newEmail("lonely")
		newUser(t, email, "lonely password", "")
		app := newWebApp(t, project)
		_, csrf, header := aBrowser(t)
		q := returned(t, app.post(t, header, "10.5.4.1", "csrf", csrf, "email", email, "password", "lonely password"))
		if q.Get("error") != "access_denied" || q.Get("error_description") != "This person has no active membership in the application's project" {
			t.Fatalf("redirect %v", q)
		}
	})
	t.Run("a blocked address", func(t *testing.T) {
		p := newPerson(t, "browserblocked")
		policy := blockingPolicy(t, p.project, "10.99.0.0/16")
		setMembership(t, p.membership, func(m map[string]any) { m["accessPolicy"] = map[string]any{"reference": policy} })
		app := newWebApp(t, p.project)
		_, csrf, header := aBrowser(t)
		q := returned(t, app.post(t, header, "10.99.0.1", "csrf", csrf, "email", p.email, "password", p.password))
		if q.Get("error") != "access_denied" || q.Get("error_description") != "IP address not allowed" {
			t.Fatalf("redirect %v", q)
		}
	})
}

// The browser's sign-in counts failures as /auth/login does.
func TestBrowserSignInLimited(t *testing.T) {
	p := newPerson(t, "guessed")
	app := newWebApp(t, p.project)
	_, csrf, header := aBrowser(t)
	for range limits.MaxFailures {
		expectPage(t, app.post(t, header, "10.5.5.1", "csrf", csrf, "email", p.email, "password", "a guess"), 400, "Email or password is invalid")
	}
	expectPage(t, app.post(t, header, "10.5.5.1", "csrf", csrf, "email", p.email, "password", p.password), 400, fhir.TooManyRequests().Message())
}

// A client the store does not have: the page, not a redirect.
func TestAuthorizeUnknownClient(t *testing.T) {
	app := webApp{params: url.Values{"response_type": {"code"}, "client_id": {uuid.NewString()}, "redirect_uri": {webCallback}}}
	resp := app.get(t, map[string]string{})
	expectPage(t, resp, 400, "The application is not known here")
	if resp.Header["Location"] != "" {
		t.Fatalf("redirected to %q", resp.Header["Location"])
	}
}

// A login that ended (expired from the bucket) between the gateway's check
// and the logout is over already: the logout succeeds, and is no 500.
func TestLogoutOfAnEndedLogin(t *testing.T) {
	resp, err := live.svc.signins.Logout(context.Background(), &bus.Request{Method: "POST", Header: map[string]string{},
		Principal: &bus.Principal{User: "User/gone", LoginID: "no-such-login"}})
	if err != nil || resp.Status != 200 || resp.Header[bus.SessionHeader] != "" {
		t.Fatalf("%v %v", resp, err)
	}
}

// max_age: a sign-in older than it asks for the password again, and the
// ID token says when the password was typed (OIDC Core §3.1.2.1).
func TestAuthorizeMaxAge(t *testing.T) {
	p := newPerson(t, "maxage")
	app := newWebApp(t, p.project)
	_, csrf, header := aBrowser(t)
	resp := app.allow(t, app.post(t, header, "10.5.9.1", "csrf", csrf, "email", p.email, "password", p.password), "10.5.9.1")
	q := returned(t, resp)
	signedIn := map[string]string{"Cookie": strings.Split(resp.Header["Set-Cookie"], ";")[0]}
	id := verify(t, decoded(t, token4(t, app, q.Get("code")), nil, 200)["id_token"].(string), app.id)
	if id.AuthTime == 0 || time.Since(time.Unix(id.AuthTime, 0)) > time.Minute {
		t.Fatalf("auth_time %d", id.AuthTime)
	}
	if q := returned(t, app.get(t, signedIn, "max_age", "3600")); q.Get("code") == "" {
		t.Fatalf("a recent sign-in asked again: %v", q)
	}
	expectPage(t, app.get(t, signedIn, "max_age", "0"), 200, `type="password"`)
	if q := returned(t, app.get(t, signedIn, "max_age", "0", "prompt", "none")); q.Get("error") != "login_required" {
		t.Fatalf("max_age=0 with prompt=none: %v", q)
	}
}
