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

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
)

// TestExternalSignInOverHTTP signs a person in through an OpenID provider
// on loopback, over the gateway: the domain's provider from /auth/method,
// the provider's return to /auth/external, the sign-in page's
// /auth/login/<login>, the code at /oauth2/token and /auth/me; and a
// token signed with a key the provider does not publish, refused.
func TestExternalSignInOverHTTP(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	forger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	codes := map[string]*rsa.PrivateKey{} // code -> the key its ID token is signed with
	var srv *httptest.Server
	email := ""
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": srv.URL, "authorization_endpoint": srv.URL + "/authorize",
			"token_endpoint": srv.URL + "/token", "jwks_uri": srv.URL + "/jwks", "id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		k := codes[r.PostForm.Get("code")]
		delete(codes, r.PostForm.Get("code"))
		mu.Unlock()
		if id, secret, _ := r.BasicAuth(); k == nil || id != "pinion" || secret != "idp-secret" {
			http.Error(w, `{"error":"invalid_grant"}`, 400)
			return
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": srv.URL, "aud": "pinion", "sub": "s-1",
			"email": email, "exp": time.Now().Add(time.Minute).Unix(), "iat": time.Now().Unix()})
		tok.Header["kid"] = "k1"
		signed, _ := tok.SignedString(k)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "x", "token_type": "Bearer", "id_token": signed})
	})
	srv = httptest.NewServer(mux)
	defer srv.Close()
	code := func(k *rsa.PrivateKey) string {
		c := uuid.NewString()
		mu.Lock()
		codes[c] = k
		mu.Unlock()
		return c
	}

	domain := "sso-" + uuid.NewString()[:8] + ".example"
	email = "eve@" + domain
	su := superToken(t)
	r := do(t, "POST", "fhir/R4/DomainConfiguration", su, "application/fhir+json", mustJSON(map[string]any{
		"resourceType": "DomainConfiguration", "domain": domain, "identityProvider": map[string]any{
			"issuer": srv.URL, "authorizeUrl": srv.URL + "/authorize", "tokenUrl": srv.URL + "/token",
			"clientId": "pinion", "clientSecret": "idp-secret"}}))
	expect(t, r, 201)
	pid, _ := adminProject(t, "SSO clinic")
	r = do(t, "POST", "admin/projects/"+pid+"/invite", su, "application/json",
		inviteBody("resourceType", "Practitioner", "firstName", "Eve", "lastName", "Sso", "email", email))
	expect(t, r, 200)
	mailTo(t, email) // the invite's last step: the membership exists

	r = do(t, "POST", "auth/method", "", "application/json", mustJSON(map[string]any{"email": email}))
	expect(t, r, 200)
	if au, _ := r.json(t)["authorizeUrl"].(string); !strings.HasPrefix(au, srv.URL+"/authorize?") {
		t.Fatalf("/auth/method answered %s", r.body)
	}

	noFollow := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	verifier := "external-verifier-" + strings.Repeat("v", 30)
	callback := func(c string) *http.Response {
		state, _ := json.Marshal(map[string]any{"domain": domain, "codeChallenge": verifier, "codeChallengeMethod": "plain"})
		resp, err := noFollow.Get(base + "auth/external?" + url.Values{"code": {c}, "state": {string(state)}}.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	// A forged ID token: a 400 OperationOutcome, no redirect.
	if resp := callback(code(forger)); resp.StatusCode != 400 {
		t.Fatalf("forged ID token answered %d", resp.StatusCode)
	}

	resp := callback(code(key))
	if resp.StatusCode != 302 {
		t.Fatalf("callback answered %d", resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || !strings.HasSuffix(loc.Path, "/signin") {
		t.Fatalf("redirect to %q", resp.Header.Get("Location"))
	}
	r = do(t, "GET", "auth/login/"+loc.Query().Get("login"), "", "", nil)
	expect(t, r, 200)
	c, _ := r.json(t)["code"].(string)
	form := url.Values{"grant_type": {"authorization_code"}, "code": {c}, "code_verifier": {verifier}}
	r = do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 200)
	at := r.json(t)["access_token"].(string)
	r = do(t, "GET", "auth/me", at, "", nil)
	expect(t, r, 200)
	if r.json(t)["project"].(map[string]any)["id"] != pid {
		t.Fatalf("/auth/me: %s", r.body)
	}
	// The audit trail has the sign-in by the provider, naming the person,
	// and the forged token's refusal.
	user := "User/" + r.json(t)["user"].(map[string]any)["id"].(string)
	eventually(t, 15*time.Second, "the external sign-in recorded", func() bool {
		in, refused := false, false
		// Newest first; the person's by their id, the refusal among the
		// server's latest (a forged token names nobody).
		evs := append(auditEvents(t, su, "sign-in", "agent", strings.TrimPrefix(user, "User/")), auditEvents(t, su, "sign-in", "outcome", "4")...)
		for _, ev := range evs {
			ents, _ := ev["entity"].([]any)
			if len(ents) == 0 || ents[0].(map[string]any)["description"] != "GET /auth/external" {
				continue
			}
			who, _, _ := agentOf(ev)
			in = in || ev["outcome"] == "0" && who == user
			refused = refused || ev["outcome"] == "4"
		}
		return in && refused
	})
}
