package identity

import (
	"context"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
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
			if got := registeredRedirects(tc.client); !reflect.DeepEqual(got, tc.want) {
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
			if a.RedirectURI != tc.redirectsTo {
				t.Fatalf("redirect URI %q, want %q", a.RedirectURI, tc.redirectsTo)
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
		{"no client", "", "https://app.example/cb", "The application did not say who it is (client_id is missing).", "https://app.example/cb"},
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
			if problem != tc.problem || a.RedirectURI != tc.redirectsTo {
				t.Fatalf("%q to %q, want %q to %q", problem, a.RedirectURI, tc.problem, tc.redirectsTo)
			}
			if a.project != "" {
				t.Fatalf("a built-in client has a project: %q", a.project)
			}
		})
	}
	if builtinClient("medplum-cli", testBase)["pkceOptional"] != true {
		t.Fatal("Medplum's command line tool must be allowed to skip PKCE")
	}
	if builtinClient(auth.ConsoleClientID, testBase)["pkceOptional"] != nil {
		t.Fatal("the console may skip PKCE")
	}
	if c := builtinClient("app", testBase); c != nil {
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
		{"code and state", authRequest{RedirectURI: "https://app.example/cb", State: "s 1"}, url.Values{"code": {"l.s"}},
			"https://app.example/cb?code=l.s&state=s+1"},
		{"no state", authRequest{RedirectURI: "https://app.example/cb"}, url.Values{"code": {"c"}},
			"https://app.example/cb?code=c"},
		{"a query of its own", authRequest{RedirectURI: "https://app.example/cb?tenant=a", State: "s"}, url.Values{"code": {"c"}},
			"https://app.example/cb?tenant=a&code=c&state=s"},
		{"nothing to add", authRequest{RedirectURI: "https://app.example/cb"}, url.Values{}, "https://app.example/cb?"},
		{"custom scheme", authRequest{RedirectURI: "com.example.app:/cb"}, url.Values{"code": {"c"}}, "com.example.app:/cb?code=c"},
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
	resp := (authRequest{RedirectURI: "https://app.example/cb", State: "xyz"}).fail("login_required", "Sign-in required")
	if got := resp.Header["Location"]; got != "https://app.example/cb?error=login_required&error_description=Sign-in+required&state=xyz" {
		t.Fatalf("error redirect %q", got)
	}
}

func TestChooseMembership(t *testing.T) {
	one := []memberChoice{{ID: "m1"}}
	two := []memberChoice{{ID: "m1"}, {ID: "m2"}}
	cases := []struct {
		name    string
		choices []memberChoice
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
		{"S256", authRequest{ClientID: "app", Scope: "openid offline_access", Nonce: "n", Challenge: "ch", ChallengeMethod: "S256"},
			session.Login{User: "User/u1", Client: "app", Scope: "openid offline_access", Nonce: "n", Membership: "m1",
				Challenge: "ch", ChallengeMethod: "S256", AuthTime: 1_700_000_000, Start: 1_700_000_000_123}},
		{"a challenge without a method is plain", authRequest{ClientID: "app", Scope: "openid", Challenge: "ch"},
			session.Login{User: "User/u1", Client: "app", Scope: "openid", Membership: "m1",
				Challenge: "ch", ChallengeMethod: "plain", AuthTime: 1_700_000_000, Start: 1_700_000_000_123}},
		{"no challenge: no PKCE", authRequest{ClientID: "medplum-cli", Scope: "openid"},
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
		if !strings.Contains(got, tc.formAction) || strings.Replace(got, tc.formAction, "form-action 'self';", 1) != pageCSP {
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

// Signing out goes back to the application only to an address it
// registered; anywhere else gets the page.
func TestSignedOutPage(t *testing.T) {
	s := unwired(t)
	cases := []struct {
		name     string
		query    url.Values
		status   int
		location string
	}{
		{"registered", url.Values{"client_id": {"medplum-cli"}, "post_logout_redirect_uri": {"http://localhost:9615"}, "state": {"bye"}},
			302, "http://localhost:9615?state=bye"},
		{"not registered", url.Values{"client_id": {"medplum-cli"}, "post_logout_redirect_uri": {"https://evil.example/"}}, 200, ""},
		{"no client", url.Values{"post_logout_redirect_uri": {"http://localhost:9615"}}, 200, ""},
		{"nowhere to go", url.Values{"client_id": {"medplum-cli"}}, 200, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := s.signedOutPage(context.Background(), &bus.Request{Method: "GET", Query: tc.query, Header: map[string]string{}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != tc.status || resp.Header["Location"] != tc.location {
				t.Fatalf("%d to %q, want %d to %q", resp.Status, resp.Header["Location"], tc.status, tc.location)
			}
			if tc.status == 200 && !strings.Contains(string(resp.Body), "You are signed out in this browser.") {
				t.Fatalf("page:\n%s", resp.Body)
			}
		})
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
