package identity

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html"
	"maps"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/limits"
	"github.com/pinion-health/pinion/services/identity/web"
)

func TestReadAuthRequest(t *testing.T) {
	q := url.Values{
		"response_type": {"code"}, "client_id": {"app"}, "redirect_uri": {"https://app.example/cb"},
		"state": {"st"}, "nonce": {"n"}, "code_challenge": {"ch"}, "code_challenge_method": {"S256"},
		"prompt": {"login"}, "login_hint": {"a@example.com"}, "unknown": {"x"},
	}
	want := authRequest{ResponseType: "code", ClientID: "app", RedirectURI: "https://app.example/cb", Scope: "openid",
		State: "st", Nonce: "n", Challenge: "ch", ChallengeMethod: "S256", Prompt: "login", LoginHint: "a@example.com"}
	if got := readAuthRequest(q); !reflect.DeepEqual(got, want) {
		t.Fatalf("no scope: %+v, want %+v", got, want)
	}
	q.Set("scope", "openid offline_access")
	want.Scope = "openid offline_access"
	if got := readAuthRequest(q); !reflect.DeepEqual(got, want) {
		t.Fatalf("with scope: %+v, want %+v", got, want)
	}
	// The pages carry the request on, without prompt and login_hint (the
	// person has answered them) and without empty parameters.
	wantValues := url.Values{
		"response_type": {"code"}, "client_id": {"app"}, "redirect_uri": {"https://app.example/cb"},
		"scope": {"openid offline_access"}, "state": {"st"}, "nonce": {"n"}, "code_challenge": {"ch"}, "code_challenge_method": {"S256"},
	}
	if got := want.values(); !reflect.DeepEqual(got, wantValues) {
		t.Fatalf("values %v, want %v", got, wantValues)
	}
	if got := (authRequest{ClientID: "app"}).values(); !reflect.DeepEqual(got, url.Values{"client_id": {"app"}}) {
		t.Fatalf("empty parameters carried: %v", got)
	}
}

func TestCheckRequest(t *testing.T) {
	optional := map[string]any{"pkceOptional": true}
	cases := []struct {
		name       string
		a          authRequest
		code, desc string
	}{
		{"S256", authRequest{ResponseType: "code", Challenge: "c", ChallengeMethod: "S256"}, "", ""},
		{"plain", authRequest{ResponseType: "code", Challenge: "c", ChallengeMethod: "plain"}, "", ""},
		{"no method", authRequest{ResponseType: "code", Challenge: "c"}, "", ""},
		{"pkce optional, skipped", authRequest{ResponseType: "code", client: optional}, "", ""},
		{"pkce optional, used", authRequest{ResponseType: "code", Challenge: "c", ChallengeMethod: "S256", client: optional}, "", ""},
		{"prompt none", authRequest{ResponseType: "code", Challenge: "c", Prompt: "none"}, "", ""},
		{"prompt login", authRequest{ResponseType: "code", Challenge: "c", Prompt: "login"}, "", ""},
		{"prompt consent", authRequest{ResponseType: "code", Challenge: "c", Prompt: "consent"}, "", ""},
		{"prompt select_account", authRequest{ResponseType: "code", Challenge: "c", Prompt: "select_account"}, "", ""},

		{"implicit", authRequest{ResponseType: "token", Challenge: "c"}, "unsupported_response_type", "Only response_type=code is supported"},
		{"hybrid", authRequest{ResponseType: "code id_token", Challenge: "c"}, "unsupported_response_type", "Only response_type=code is supported"},
		{"no response type", authRequest{Challenge: "c"}, "unsupported_response_type", "Only response_type=code is supported"},
		{"response type first", authRequest{ResponseType: "token", ChallengeMethod: "MD5", Prompt: "x"}, "unsupported_response_type", "Only response_type=code is supported"},
		{"no challenge", authRequest{ResponseType: "code"}, "invalid_request", "Missing code_challenge (PKCE is required)"},
		{"pkceOptional must be true itself", authRequest{ResponseType: "code", client: map[string]any{"pkceOptional": "true"}},
			"invalid_request", "Missing code_challenge (PKCE is required)"},
		{"pkceOptional false", authRequest{ResponseType: "code", client: map[string]any{"pkceOptional": false}},
			"invalid_request", "Missing code_challenge (PKCE is required)"},
		{"unknown method", authRequest{ResponseType: "code", Challenge: "c", ChallengeMethod: "MD5"}, "invalid_request", "Invalid code_challenge_method"},
		{"lower-case method", authRequest{ResponseType: "code", Challenge: "c", ChallengeMethod: "s256"}, "invalid_request", "Invalid code_challenge_method"},
		{"method without a challenge, pkce optional", authRequest{ResponseType: "code", ChallengeMethod: "SHA1", client: optional},
			"invalid_request", "Invalid code_challenge_method"},
		{"unknown prompt", authRequest{ResponseType: "code", Challenge: "c", Prompt: "create"}, "invalid_request", "Invalid prompt"},
		{"two prompts", authRequest{ResponseType: "code", Challenge: "c", Prompt: "login consent"}, "invalid_request", "Invalid prompt"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, desc := tc.a.checkRequest()
			if code != tc.code || desc != tc.desc {
				t.Fatalf("%q %q, want %q %q", code, desc, tc.code, tc.desc)
			}
		})
	}
}

func TestRegisteredRedirects(t *testing.T) {
	cases := []struct {
		name   string
		client map[string]any
		want   []string
	}{
		{"none", map[string]any{}, nil},
		{"nil client", nil, nil},
		{"redirectUri", map[string]any{"redirectUri": "https://a.example/cb"}, []string{"https://a.example/cb"}},
		{"redirectUris", map[string]any{"redirectUris": []any{"https://a.example/1", "https://a.example/2"}},
			[]string{"https://a.example/1", "https://a.example/2"}},
		{"both, redirectUri first", map[string]any{"redirectUris": []any{"https://a.example/2"}, "redirectUri": "https://a.example/1"},
			[]string{"https://a.example/1", "https://a.example/2"}},
		{"non-strings skipped", map[string]any{"redirectUri": 7, "redirectUris": []any{nil, "https://a.example/1", map[string]any{}}},
			[]string{"https://a.example/1"}},
		{"redirectUris not a list", map[string]any{"redirectUris": "https://a.example/1"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := clients.RegisteredRedirects(tc.client); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckRedirect(t *testing.T) {
	const unregistered = "The application asked to return to an address it did not register (redirect_uri)."
	one := map[string]any{"redirectUri": "https://app.example/cb"}
	two := map[string]any{"redirectUris": []any{"https://app.example/cb", "com.example.app:/cb"}}
	cases := []struct {
		name        string
		client      map[string]any
		redirect    string
		problem     string
		redirectsTo string
	}{
		{"registered", one, "https://app.example/cb", "", "https://app.example/cb"},
		{"none given, one registered", one, "", "", "https://app.example/cb"},
		{"one of several", two, "com.example.app:/cb", "", "com.example.app:/cb"},
		{"none given, several registered", two, "", unregistered, ""},
		{"nothing registered", map[string]any{}, "https://app.example/cb", unregistered, "https://app.example/cb"},
		{"none given, nothing registered", map[string]any{}, "", unregistered, ""},
		{"another host", one, "https://evil.example/cb", unregistered, "https://evil.example/cb"},
		{"a longer path", one, "https://app.example/cb/more", unregistered, "https://app.example/cb/more"},
		{"a query added", one, "https://app.example/cb?x=1", unregistered, "https://app.example/cb?x=1"},
		{"a trailing slash", one, "https://app.example/cb/", unregistered, "https://app.example/cb/"},
		{"a prefix", one, "https://app.example/c", unregistered, "https://app.example/c"},
		{"the host's case", one, "https://APP.example/cb", unregistered, "https://APP.example/cb"},
		{"http for https", one, "http://app.example/cb", unregistered, "http://app.example/cb"},
		{"a fragment", one, "https://app.example/cb#x", unregistered, "https://app.example/cb#x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := authRequest{RedirectURI: tc.redirect, client: tc.client}
			if got := a.checkRedirect(); got != tc.problem {
				t.Fatalf("problem %q, want %q", got, tc.problem)
			}
			if a.target != tc.redirectsTo {
				t.Fatalf("redirect URI %q, want %q", a.target, tc.redirectsTo)
			}
			if a.RedirectURI != tc.redirect {
				t.Fatalf("the redirect URI sent became %q: the token request must send what was sent", a.RedirectURI)
			}
		})
	}
}

// The clients known without a stored ClientApplication are found without
// a lookup; any other needs one.
func TestCheckClientBuiltin(t *testing.T) {
	s := unwired(t)
	cases := []struct {
		name, client, redirect string
		problem                string
		redirectsTo            string
	}{
		{"no client", "", "https://app.example/cb", "The application did not say who it is (client_id is missing).", ""},
		{"medplum-cli", "medplum-cli", "http://localhost:9615", "", "http://localhost:9615"},
		{"medplum-cli, its only redirect", "medplum-cli", "", "", "http://localhost:9615"},
		{"medplum-cli, another port", "medplum-cli", "http://localhost:9616", "The application asked to return to an address it did not register (redirect_uri).", "http://localhost:9616"},
		{"console", auth.ConsoleClientID, testBase + "console/callback", "", testBase + "console/callback"},
		{"console, its only redirect", auth.ConsoleClientID, "", "", testBase + "console/callback"},
		{"console, elsewhere", auth.ConsoleClientID, "https://evil.example/console/callback", "The application asked to return to an address it did not register (redirect_uri).", "https://evil.example/console/callback"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := authRequest{ClientID: tc.client, RedirectURI: tc.redirect}
			problem, err := s.checkClient(context.Background(), &a)
			if err != nil {
				t.Fatal(err)
			}
			if problem != tc.problem || a.target != tc.redirectsTo {
				t.Fatalf("%q to %q, want %q to %q", problem, a.target, tc.problem, tc.redirectsTo)
			}
			if a.project != "" {
				t.Fatalf("a built-in client has a project: %q", a.project)
			}
			if tc.client != "" && (!a.firstParty || !a.anyProject) {
				t.Fatalf("a built-in client is not first-party for every project: %+v", a)
			}
		})
	}
	if clients.Builtin("medplum-cli", testBase)["pkceOptional"] != true {
		t.Fatal("Medplum's command line tool must be allowed to skip PKCE")
	}
	if clients.Builtin(auth.ConsoleClientID, testBase)["pkceOptional"] != nil {
		t.Fatal("the console may skip PKCE")
	}
	if c := clients.Builtin("app", testBase); c != nil {
		t.Fatalf("an unknown client is built in: %v", c)
	}
}

func TestAuthRequestRedirect(t *testing.T) {
	cases := []struct {
		name   string
		a      authRequest
		params url.Values
		want   string
	}{
		{"code and state", authRequest{target: "https://app.example/cb", State: "s 1"}, url.Values{"code": {"l.s"}},
			"https://app.example/cb?code=l.s&state=s+1"},
		{"no state", authRequest{target: "https://app.example/cb"}, url.Values{"code": {"c"}},
			"https://app.example/cb?code=c"},
		{"a query of its own", authRequest{target: "https://app.example/cb?tenant=a", State: "s"}, url.Values{"code": {"c"}},
			"https://app.example/cb?tenant=a&code=c&state=s"},
		{"nothing to add", authRequest{target: "https://app.example/cb"}, url.Values{}, "https://app.example/cb?"},
		{"custom scheme", authRequest{target: "com.example.app:/cb"}, url.Values{"code": {"c"}}, "com.example.app:/cb?code=c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := tc.a.redirect(tc.params)
			want := map[string]string{"Location": tc.want, "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
			if resp.Status != 302 || !reflect.DeepEqual(resp.Header, want) || len(resp.Body) != 0 {
				t.Fatalf("%d %v, want 302 %v", resp.Status, resp.Header, want)
			}
		})
	}
	resp := (authRequest{target: "https://app.example/cb", State: "xyz"}).fail("login_required", "Sign-in required")
	if got := resp.Header["Location"]; got != "https://app.example/cb?error=login_required&error_description=Sign-in+required&state=xyz" {
		t.Fatalf("error redirect %q", got)
	}
}

func TestChooseMembership(t *testing.T) {
	one := []account.Choice{{ID: "m1"}}
	two := []account.Choice{{ID: "m1"}, {ID: "m2"}}
	cases := []struct {
		name    string
		choices []account.Choice
		chosen  string
		want    string
	}{
		{"the only one", one, "", "m1"},
		{"the only one, whatever was chosen", one, "m9", "m1"},
		{"chosen among several", two, "m2", "m2"},
		{"not chosen among several", two, "", ""},
		{"chosen, not the person's", two, "m9", ""},
		{"none", nil, "m1", ""},
	}
	for _, tc := range cases {
		if got := chooseMembership(tc.choices, tc.chosen); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestAuthRequestLogin(t *testing.T) {
	bs := &browserSession{User: "User/u1", AuthTime: 1_700_000_000, Start: 1_700_000_000_123}
	cases := []struct {
		name string
		a    authRequest
		want session.Login
	}{
		{"S256", authRequest{ClientID: "app", Scope: "openid offline_access", Nonce: "n", Challenge: "ch", ChallengeMethod: "S256",
			RedirectURI: "https://app.example/cb"},
			session.Login{User: "User/u1", Client: "app", Scope: "openid offline_access", Nonce: "n", Membership: "m1",
				Challenge: "ch", ChallengeMethod: "S256", AuthTime: 1_700_000_000, Start: 1_700_000_000_123,
				RedirectURI: "https://app.example/cb", Consented: true}},
		{"a challenge without a method is plain", authRequest{ClientID: "app", Scope: "openid", Challenge: "ch"},
			session.Login{User: "User/u1", Client: "app", Scope: "openid", Membership: "m1",
				Challenge: "ch", ChallengeMethod: "plain", AuthTime: 1_700_000_000, Start: 1_700_000_000_123, Consented: true}},
		{"no challenge: no PKCE; first-party: no consent", authRequest{ClientID: "medplum-cli", Scope: "openid", firstParty: true},
			session.Login{User: "User/u1", Client: "medplum-cli", Scope: "openid", Membership: "m1",
				ChallengeMethod: "plain", NoPKCE: true, AuthTime: 1_700_000_000, Start: 1_700_000_000_123}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.login(bs, "m1"); got != tc.want {
				t.Fatalf("%+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestAuthorizeCSP(t *testing.T) {
	cases := []struct{ redirect, formAction string }{
		{"https://app.example/cb?x=1", "form-action 'self' https://app.example;"},
		{"http://localhost:9615", "form-action 'self' http://localhost:9615;"},
		{"com.example.app:/cb", "form-action 'self' com.example.app:;"},
		{"/relative", "form-action 'self';"},
		{"", "form-action 'self';"},
		{"%zz", "form-action 'self';"},
	}
	for _, tc := range cases {
		got := authorizeCSP(tc.redirect)
		if !strings.Contains(got, tc.formAction) || strings.Replace(got, tc.formAction, "form-action 'self';", 1) != web.CSP {
			t.Errorf("%q: %s", tc.redirect, got)
		}
	}
}

func TestClientNameAndDisplay(t *testing.T) {
	for _, tc := range []struct {
		client map[string]any
		want   string
	}{
		{map[string]any{"name": "Backend"}, "Backend"},
		{map[string]any{"name": ""}, "An application"},
		{map[string]any{"name": 3}, "An application"},
		{nil, "An application"},
	} {
		if got := clientName(tc.client); got != tc.want {
			t.Errorf("clientName(%v) = %q, want %q", tc.client, got, tc.want)
		}
	}
	for _, tc := range []struct {
		ref  *fhir.Reference
		want string
	}{
		{&fhir.Reference{Reference: "Project/p1", Display: "Clinic"}, "Clinic"},
		{&fhir.Reference{Reference: "Project/p1"}, "Project/p1"},
		{nil, ""},
	} {
		if got := display(tc.ref); got != tc.want {
			t.Errorf("display(%v) = %q, want %q", tc.ref, got, tc.want)
		}
	}
}

// Logging out what holds no session (HTTP Basic has no token) succeeds
// without a write; nobody signed in gets the signed-out page.
func TestLogoutWithoutSession(t *testing.T) {
	s := unwired(t)
	resp, err := s.logout(context.Background(), &bus.Request{Method: "POST", Header: map[string]string{},
		Principal: &bus.Principal{User: "ClientApplication/c1", LoginID: "l1"}})
	if err != nil || resp.Status != 200 || resp.Header[bus.SessionHeader] != "" || !strings.Contains(string(resp.Body), `"id":"ok"`) {
		t.Fatalf("%v %v", resp, err)
	}
	resp, err = s.logout(context.Background(), &bus.Request{Method: "GET", Header: map[string]string{}})
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
	resp, err := live.svc.authorize(context.Background(), &bus.Request{Method: "GET", Query: q, Header: header, Remote: "10.5.0.1"})
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
	resp, err := live.svc.authorize(context.Background(), r)
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
	resp, err := live.svc.authorize(context.Background(), r)
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
	if bs, err := live.svc.signedIn(ctx, b); err != nil || bs != nil {
		t.Fatalf("the old id is signed in: %+v %v", bs, err)
	}
	bs, err := live.svc.signedIn(ctx, nb)
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
	resp, err := live.svc.logout(context.Background(), &bus.Request{Method: "POST", Header: map[string]string{},
		Principal: &bus.Principal{User: "User/gone", LoginID: "no-such-login"}})
	if err != nil || resp.Status != 200 || resp.Header[bus.SessionHeader] != "" {
		t.Fatalf("%v %v", resp, err)
	}
}

// max_age: a sign-in older than it asks for the password again, and the
// ID token says when the password was typed (OIDC Core §3.1.2.1).
func TestAuthorizeMaxAge(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	bs := &browserSession{AuthTime: now.Unix() - 100}
	for _, tc := range []struct {
		maxAge string
		old    bool
	}{{"", false}, {"101", false}, {"100", false}, {"99", true}, {"0", true}} {
		if got := (authRequest{MaxAge: tc.maxAge}).tooOld(bs, now); got != tc.old {
			t.Errorf("max_age=%q: too old %v, want %v", tc.maxAge, got, tc.old)
		}
	}
	if code, _ := (authRequest{ResponseType: "code", Challenge: "c", MaxAge: "-1"}).checkRequest(); code != "invalid_request" {
		t.Errorf("max_age=-1: %q", code)
	}

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
