package signin

import (
	"context"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/web"
)

// testBase is the base URL the checks run under.
const testBase = "https://pinion.example/"

func TestReadAuthRequest(t *testing.T) {
	q := url.Values{
		"response_type": {"code"}, "client_id": {"app"}, "redirect_uri": {"https://app.example/cb"},
		"state": {"st"}, "nonce": {"n"}, "code_challenge": {"ch"}, "code_challenge_method": {"S256"},
		"prompt": {"login"}, "login_hint": {"a@example.com"}, "unknown": {"x"},
	}
	want := AuthRequest{ResponseType: "code", ClientID: "app", RedirectURI: "https://app.example/cb", Scope: "openid",
		State: "st", Nonce: "n", Challenge: "ch", ChallengeMethod: "S256", Prompt: "login", LoginHint: "a@example.com"}
	if got := ReadAuthRequest(q); !reflect.DeepEqual(got, want) {
		t.Fatalf("no scope: %+v, want %+v", got, want)
	}
	q.Set("scope", "openid offline_access")
	want.Scope = "openid offline_access"
	if got := ReadAuthRequest(q); !reflect.DeepEqual(got, want) {
		t.Fatalf("with scope: %+v, want %+v", got, want)
	}
	// The pages carry the request on, without prompt and login_hint (the
	// person has answered them) and without empty parameters.
	wantValues := url.Values{
		"response_type": {"code"}, "client_id": {"app"}, "redirect_uri": {"https://app.example/cb"},
		"scope": {"openid offline_access"}, "state": {"st"}, "nonce": {"n"}, "code_challenge": {"ch"}, "code_challenge_method": {"S256"},
	}
	if got := want.Values(); !reflect.DeepEqual(got, wantValues) {
		t.Fatalf("values %v, want %v", got, wantValues)
	}
	if got := (AuthRequest{ClientID: "app"}).Values(); !reflect.DeepEqual(got, url.Values{"client_id": {"app"}}) {
		t.Fatalf("empty parameters carried: %v", got)
	}
}

func TestCheckRequest(t *testing.T) {
	optional := map[string]any{"pkceOptional": true}
	cases := []struct {
		name       string
		a          AuthRequest
		code, desc string
	}{
		{"S256", AuthRequest{ResponseType: "code", Challenge: "c", ChallengeMethod: "S256"}, "", ""},
		{"plain", AuthRequest{ResponseType: "code", Challenge: "c", ChallengeMethod: "plain"}, "", ""},
		{"no method", AuthRequest{ResponseType: "code", Challenge: "c"}, "", ""},
		{"pkce optional, skipped", AuthRequest{ResponseType: "code", client: optional}, "", ""},
		{"pkce optional, used", AuthRequest{ResponseType: "code", Challenge: "c", ChallengeMethod: "S256", client: optional}, "", ""},
		{"prompt none", AuthRequest{ResponseType: "code", Challenge: "c", Prompt: "none"}, "", ""},
		{"prompt login", AuthRequest{ResponseType: "code", Challenge: "c", Prompt: "login"}, "", ""},
		{"prompt consent", AuthRequest{ResponseType: "code", Challenge: "c", Prompt: "consent"}, "", ""},
		{"prompt select_account", AuthRequest{ResponseType: "code", Challenge: "c", Prompt: "select_account"}, "", ""},

		{"implicit", AuthRequest{ResponseType: "token", Challenge: "c"}, "unsupported_response_type", "Only response_type=code is supported"},
		{"hybrid", AuthRequest{ResponseType: "code id_token", Challenge: "c"}, "unsupported_response_type", "Only response_type=code is supported"},
		{"no response type", AuthRequest{Challenge: "c"}, "unsupported_response_type", "Only response_type=code is supported"},
		{"response type first", AuthRequest{ResponseType: "token", ChallengeMethod: "MD5", Prompt: "x"}, "unsupported_response_type", "Only response_type=code is supported"},
		{"no challenge", AuthRequest{ResponseType: "code"}, "invalid_request", "Missing code_challenge (PKCE is required)"},
		{"pkceOptional must be true itself", AuthRequest{ResponseType: "code", client: map[string]any{"pkceOptional": "true"}},
			"invalid_request", "Missing code_challenge (PKCE is required)"},
		{"pkceOptional false", AuthRequest{ResponseType: "code", client: map[string]any{"pkceOptional": false}},
			"invalid_request", "Missing code_challenge (PKCE is required)"},
		{"unknown method", AuthRequest{ResponseType: "code", Challenge: "c", ChallengeMethod: "MD5"}, "invalid_request", "Invalid code_challenge_method"},
		{"lower-case method", AuthRequest{ResponseType: "code", Challenge: "c", ChallengeMethod: "s256"}, "invalid_request", "Invalid code_challenge_method"},
		{"method without a challenge, pkce optional", AuthRequest{ResponseType: "code", ChallengeMethod: "SHA1", client: optional},
			"invalid_request", "Invalid code_challenge_method"},
		{"unknown prompt", AuthRequest{ResponseType: "code", Challenge: "c", Prompt: "create"}, "invalid_request", "Invalid prompt"},
		{"two prompts", AuthRequest{ResponseType: "code", Challenge: "c", Prompt: "login consent"}, "invalid_request", "Invalid prompt"},
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
			a := AuthRequest{RedirectURI: tc.redirect, client: tc.client}
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
	s := &Service{cfg: Config{BaseURL: testBase}}
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
			a := AuthRequest{ClientID: tc.client, RedirectURI: tc.redirect}
			problem, err := s.CheckClient(context.Background(), &a)
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
		a      AuthRequest
		params url.Values
		want   string
	}{
		{"code and state", AuthRequest{target: "https://app.example/cb", State: "s 1"}, url.Values{"code": {"l.s"}},
			"https://app.example/cb?code=l.s&state=s+1"},
		{"no state", AuthRequest{target: "https://app.example/cb"}, url.Values{"code": {"c"}},
			"https://app.example/cb?code=c"},
		{"a query of its own", AuthRequest{target: "https://app.example/cb?tenant=a", State: "s"}, url.Values{"code": {"c"}},
			"https://app.example/cb?tenant=a&code=c&state=s"},
		{"nothing to add", AuthRequest{target: "https://app.example/cb"}, url.Values{}, "https://app.example/cb?"},
		{"custom scheme", AuthRequest{target: "com.example.app:/cb"}, url.Values{"code": {"c"}}, "com.example.app:/cb?code=c"},
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
	resp := (AuthRequest{target: "https://app.example/cb", State: "xyz"}).fail("login_required", "Sign-in required")
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
	bs := &BrowserSession{User: "User/u1", AuthTime: 1_700_000_000, Start: 1_700_000_000_123}
	cases := []struct {
		name string
		a    AuthRequest
		want session.Login
	}{
		{"S256", AuthRequest{ClientID: "app", Scope: "openid offline_access", Nonce: "n", Challenge: "ch", ChallengeMethod: "S256",
			RedirectURI: "https://app.example/cb"},
			session.Login{User: "User/u1", Client: "app", Scope: "openid offline_access", Nonce: "n", Membership: "m1",
				Challenge: "ch", ChallengeMethod: "S256", AuthTime: 1_700_000_000, Start: 1_700_000_000_123,
				RedirectURI: "https://app.example/cb", Consented: true}},
		{"a challenge without a method is plain", AuthRequest{ClientID: "app", Scope: "openid", Challenge: "ch"},
			session.Login{User: "User/u1", Client: "app", Scope: "openid", Membership: "m1",
				Challenge: "ch", ChallengeMethod: "plain", AuthTime: 1_700_000_000, Start: 1_700_000_000_123, Consented: true}},
		{"no challenge: no PKCE; first-party: no consent", AuthRequest{ClientID: "medplum-cli", Scope: "openid", firstParty: true},
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
		got := AuthorizeCSP(tc.redirect)
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

// max_age: a sign-in older than it asks for the password again.
func TestTooOld(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	bs := &BrowserSession{AuthTime: now.Unix() - 100}
	for _, tc := range []struct {
		maxAge string
		old    bool
	}{{"", false}, {"101", false}, {"100", false}, {"99", true}, {"0", true}} {
		if got := (AuthRequest{MaxAge: tc.maxAge}).tooOld(bs, now); got != tc.old {
			t.Errorf("max_age=%q: too old %v, want %v", tc.maxAge, got, tc.old)
		}
	}
	if code, _ := (AuthRequest{ResponseType: "code", Challenge: "c", MaxAge: "-1"}).checkRequest(); code != "invalid_request" {
		t.Errorf("max_age=-1: %q", code)
	}
}
