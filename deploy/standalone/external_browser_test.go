package standalone

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/config"
)

// The sign-in page routes by e-mail domain, in Chromium: a person of a
// domain with an OpenID provider types only their address, is sent to the
// provider on loopback (which signs them in at once, with the nonce it was
// given), comes back through /auth/external signed in and reaches the
// application with a code, in a project that takes no password
// (requireExternalSignIn) — which the same person's password is refused.
func TestExternalSignInPageInBrowser(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	domain := "sso-page-" + uuid.NewString()[:8] + ".example"
	email := "fay@" + domain
	var mu sync.Mutex
	nonces := map[string]string{} // code -> the nonce its sign-in was given
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": srv.URL, "authorization_endpoint": srv.URL + "/authorize",
			"token_endpoint": srv.URL + "/token", "jwks_uri": srv.URL + "/jwks", "id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	// The provider's sign-in: this person, at once.
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if q.Get("client_id") != "pinion" || q.Get("response_type") != "code" {
			http.Error(w, "bad request", 400)
			return
		}
		c := uuid.NewString()
		mu.Lock()
		nonces[c] = q.Get("nonce")
		mu.Unlock()
		back, err := url.Parse(q.Get("redirect_uri"))
		if err != nil {
			http.Error(w, "bad redirect", 400)
			return
		}
		back.RawQuery = url.Values{"code": {c}, "state": {q.Get("state")}}.Encode()
		http.Redirect(w, r, back.String(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		nonce, ok := nonces[r.PostForm.Get("code")]
		delete(nonces, r.PostForm.Get("code"))
		mu.Unlock()
		if id, secret, _ := r.BasicAuth(); !ok || id != "pinion" || secret != "idp-secret" {
			http.Error(w, `{"error":"invalid_grant"}`, 400)
			return
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": srv.URL, "aud": "pinion", "sub": "fay",
			"email": email, "email_verified": true, "nonce": nonce, "exp": time.Now().Add(time.Minute).Unix(), "iat": time.Now().Unix()})
		tok.Header["kid"] = "k1"
		signed, _ := tok.SignedString(key)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "x", "token_type": "Bearer", "id_token": signed})
	})
	srv = httptest.NewServer(mux)
	defer srv.Close()

	su := superToken(t)
	expect(t, do(t, "POST", "fhir/R4/DomainConfiguration", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "DomainConfiguration", "domain": domain, "identityProvider": map[string]any{
			"issuer": srv.URL, "authorizeUrl": srv.URL + "/authorize", "tokenUrl": srv.URL + "/token",
			"clientId": "pinion", "clientSecret": "idp-secret"}})), 201)
	pid, _ := adminProject(t, "SSO page clinic")
	r := do(t, "GET", "fhir/R4/Project/"+pid, su, "", nil)
	expect(t, r, 200)
	p := r.json(t)
	p["setting"] = []any{map[string]any{"name": "requireExternalSignIn", "valueBoolean": true}}
	expect(t, do(t, "PUT", "fhir/R4/Project/"+pid, su, "application/fhir+json", mustJSON(p)), 200)
	expect(t, do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Fay", "lastName", "Sso", "email", email, "sendEmail", false, "password", "fay's password")), 200)
	app := newTestApp(t)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "SSO page app", "redirectUri": app.callback()}))
	expect(t, r, 201)
	clientID, clientSecret := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	verifier, challenge := pkce("fay")
	// The browser uses the server's own base URL, where the provider sends
	// it back, so that its cookie goes there too.
	start := config.DeriveBaseURL(stack.Addr) + "oauth2/authorize?response_type=code&client_id=" + clientID + "&redirect_uri=" + url.QueryEscape(app.callback()) +
		"&scope=openid&state=sso&code_challenge=" + challenge + "&code_challenge_method=S256"

	// The password is not the way in to this project.
	r = do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{"email": email, "password": "fay's password",
		"projectId": pid, "codeChallenge": challenge, "codeChallengeMethod": "S256"}))
	expect(t, r, 400)
	if !strings.Contains(string(r.body), "requires signing in through its identity provider") {
		t.Fatalf("password sign-in: %s", r.body)
	}

	ctx := newBrowser(t)
	run(t, ctx, chromedp.Navigate(start), chromedp.WaitVisible(chromedp.ID("email")),
		chromedp.SendKeys(chromedp.ID("email"), email),
		chromedp.Click(chromedp.CSS("button")))
	waitText(t, ctx, "Continue to your organisation's sign-in")
	shot(t, ctx, "external-signin-routed")
	run(t, ctx, chromedp.Click(chromedp.CSS("main a")), chromedp.WaitVisible(chromedp.CSS(`button[value="allow"]`)),
		chromedp.Click(chromedp.CSS(`button[value="allow"]`)))
	got := app.wait(t, ctx, "sso")
	form := url.Values{"grant_type": {"authorization_code"}, "code": {got.Get("code")}, "code_verifier": {verifier},
		"client_id": {clientID}, "client_secret": {clientSecret}, "redirect_uri": {app.callback()}}
	r = do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 200)
	r = do(t, "GET", "auth/me", r.json(t)["access_token"].(string), "", nil)
	expect(t, r, 200)
	if r.json(t)["project"].(map[string]any)["id"] != pid {
		t.Fatalf("/auth/me: %s", r.body)
	}
}
