package identity

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
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

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
)

// oidcProvider is an OpenID provider on loopback, over real HTTP:
// discovery, a key set, a token endpoint that redeems the codes the test
// hands out (as the provider's sign-in page would) and user info. Each
// code carries the ID token claims, and the key, the provider answers it
// with, so a test can forge one.
type oidcProvider struct {
	srv          *httptest.Server
	key          *rsa.PrivateKey
	clientID     string
	clientSecret string

	mu    sync.Mutex
	codes map[string]issued
	// tokens are the access tokens the provider issued, and the user info
	// each answers.
	tokens map[string]map[string]any
	seen   []url.Values // token requests, as received
}

type issued struct {
	claims jwt.MapClaims
	key    *rsa.PrivateKey
}

func newOIDCProvider(t *testing.T) *oidcProvider {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &oidcProvider{key: key, clientID: "pinion-" + uuid.NewString()[:8], clientSecret: "provider secret", codes: map[string]issued{}, tokens: map[string]map[string]any{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": p.srv.URL, "authorization_endpoint": p.srv.URL + "/authorize", "token_endpoint": p.srv.URL + "/token",
			"userinfo_endpoint": p.srv.URL + "/userinfo", "jwks_uri": p.srv.URL + "/jwks",
			"id_token_signing_alg_values_supported": []string{"RS256"}, "response_types_supported": []string{"code"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		p.mu.Lock()
		p.seen = append(p.seen, r.PostForm)
		got, ok := p.codes[r.PostForm.Get("code")]
		delete(p.codes, r.PostForm.Get("code"))
		p.mu.Unlock()
		// RFC 6749 §2.3.1: Basic's parts are form-encoded.
		id, secret, basic := r.BasicAuth()
		if basic {
			id, _ = url.QueryUnescape(id)
			secret, _ = url.QueryUnescape(secret)
		} else {
			id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		}
		w.Header().Set("Content-Type", "application/json")
		if !ok || id != p.clientID || secret != p.clientSecret || r.PostForm.Get("grant_type") != "authorization_code" {
			w.WriteHeader(400)
			_, _ = w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, got.claims)
		tok.Header["kid"] = "k1"
		signed, err := tok.SignedString(got.key)
		if err != nil {
			w.WriteHeader(500)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "at-" + uuid.NewString(), "token_type": "Bearer", "expires_in": 300, "id_token": signed})
	})
	mux.HandleFunc("GET /userinfo", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		info, ok := p.tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		p.mu.Unlock()
		if !ok {
			w.WriteHeader(401)
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(info)
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

// code hands out a code whose ID token has these claims (over valid
// defaults for this provider), signed with key (the provider's when nil).
func (p *oidcProvider) code(edit func(jwt.MapClaims), key *rsa.PrivateKey) string {
	now := time.Now()
	c := jwt.MapClaims{"iss": p.srv.URL, "aud": p.clientID, "sub": "sub-" + uuid.NewString()[:8],
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
	if edit != nil {
		edit(c)
	}
	if key == nil {
		key = p.key
	}
	code := uuid.NewString()
	p.mu.Lock()
	p.codes[code] = issued{claims: c, key: key}
	p.mu.Unlock()
	return code
}

// accessToken is an access token of the provider whose user info is info.
func (p *oidcProvider) accessToken(info map[string]any) string {
	tok := "at-" + uuid.NewString()
	p.mu.Lock()
	p.tokens[tok] = info
	p.mu.Unlock()
	return tok
}

// idp is the provider as an IdentityProvider setting.
func (p *oidcProvider) idp(extra map[string]any) map[string]any {
	m := map[string]any{"issuer": p.srv.URL, "authorizeUrl": p.srv.URL + "/authorize", "tokenUrl": p.srv.URL + "/token",
		"userInfoUrl": p.srv.URL + "/userinfo", "clientId": p.clientID, "clientSecret": p.clientSecret}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// callback is the browser's return to GET /auth/external.
func callback(code string, state map[string]any) (*bus.Response, error) {
	b, _ := json.Marshal(state)
	return live.svc.federation.ExternalCallback(context.Background(), &bus.Request{Method: "GET", Remote: "10.9.0.1",
		Query: url.Values{"code": {code}, "state": {string(b)}}})
}

// signedInLogin follows the sign-in page's redirect: the login it names,
// and GET /auth/login/<login>'s answer.
func signedInLogin(t *testing.T, resp *bus.Response, err error) (string, map[string]any) {
	t.Helper()
	if err != nil {
		t.Fatalf("callback: %v", err)
	}
	if resp.Status != 302 {
		t.Fatalf("callback answered %d %s", resp.Status, resp.Body)
	}
	u, perr := url.Parse(resp.Header["Location"])
	if perr != nil || !strings.HasSuffix(u.Path, "/signin") {
		t.Fatalf("redirect to %q", resp.Header["Location"])
	}
	login := u.Query().Get("login")
	st, err := live.svc.federation.LoginStatus(context.Background(), &bus.Request{Method: "GET", Params: map[string]string{"login": login}, Remote: "10.9.0.1"})
	return login, decoded(t, st, err, 200)
}

// extRefused checks an error is a 400 OperationOutcome with this text.
func extRefused(t *testing.T, resp *bus.Response, err error, text string) {
	t.Helper()
	var oe *fhir.Error
	if err == nil {
		t.Fatalf("answered %d %s, want %q", resp.Status, resp.Body, text)
	}
	if !errors.As(err, &oe) || oe.Status != 400 || !strings.Contains(oe.Error(), text) {
		t.Fatalf("refused with %v, want 400 %q", err, text)
	}
}

// newDomain stores a DomainConfiguration for a fresh domain with this
// provider and returns the domain.
func newDomain(t *testing.T, idp map[string]any) string {
	t.Helper()
	domain := "hospital-" + uuid.NewString()[:8] + ".example"
	if _, err := live.conns.Repo.Create(context.Background(), repo.AllProjects, map[string]any{
		"resourceType": "DomainConfiguration", "domain": domain, "identityProvider": idp}, repo.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return domain
}

func TestExternalSignInByDomain(t *testing.T) {
	p := newOIDCProvider(t)
	domain := newDomain(t, p.idp(map[string]any{"usePkce": true}))
	other := newDomain(t, newOIDCProvider(t).idp(nil))
	email := "ada@" + domain
	project := newProject(t, "Hospital")
	user := "User/" + newUser(t, email, "", "")
	profile := newPractitioner(t, project, "Ada", "Ext")
	newMembership(t, project, user, profile, nil)

	// The sign-in page routes the address to its domain's provider.
	resp, err := live.svc.federation.Method(context.Background(), jsonRequest("10.9.0.1", map[string]any{"email": email}))
	out := decoded(t, resp, err, 200)
	if au, _ := out["authorizeUrl"].(string); !strings.HasPrefix(au, p.srv.URL+"/authorize?") || !strings.Contains(au, url.QueryEscape(p.clientID)) {
		t.Fatalf("/auth/method answered %v", out)
	}

	verifier := "plain-verifier-" + uuid.NewString()
	state := map[string]any{"domain": domain, "codeChallenge": verifier, "codeChallengeMethod": "plain", "nonce": "n-1"}
	resp, err = callback(p.code(func(c jwt.MapClaims) { c["email"] = strings.ToUpper(email); c["nonce"] = "n-1" }, nil), state)
	login, status := signedInLogin(t, resp, err)
	code, _ := status["code"].(string)
	if !strings.HasPrefix(code, login+".") {
		t.Fatalf("login status %v", status)
	}
	// The provider got Pinion's redirect URI and, with usePkce, the verifier.
	p.mu.Lock()
	form := p.seen[len(p.seen)-1]
	p.mu.Unlock()
	if form.Get("code_verifier") != verifier || form.Get("redirect_uri") != testBase+"auth/external" {
		t.Fatalf("token request %v", form)
	}
	tok := decoded(t, token(t, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier}}, nil), nil, 200)
	if c := verify(t, tok["access_token"].(string), testBase); c.Profile != profile {
		t.Fatalf("token for %q, want %s", c.Profile, profile)
	}
	// The code is given once.
	st, err := live.svc.federation.LoginStatus(context.Background(), &bus.Request{Params: map[string]string{"login": login}})
	extRefused(t, st, err, "Login")

	// A provider cannot sign in an address of another domain, and a domain's
	// state with another domain's provider's token fails its verification.
	resp, err = callback(p.code(func(c jwt.MapClaims) { c["email"] = "eve@elsewhere.example" }, nil), state)
	extRefused(t, resp, err, "Email address does not match domain")
	resp, err = callback(p.code(func(c jwt.MapClaims) { c["email"] = email }, nil), map[string]any{"domain": other})
	extRefused(t, resp, err, "Failed to verify code")
	// An address the provider has not verified.
	resp, err = callback(p.code(func(c jwt.MapClaims) { c["email"] = email; c["email_verified"] = false }, nil), state)
	extRefused(t, resp, err, "not verified")
	// Nobody with the address.
	resp, err = callback(p.code(func(c jwt.MapClaims) { c["email"] = "nobody@" + domain }, nil), map[string]any{"domain": domain})
	extRefused(t, resp, err, "User not found")
}

func TestExternalForgedIDTokens(t *testing.T) {
	p := newOIDCProvider(t)
	domain := newDomain(t, p.idp(nil))
	email := "bob@" + domain
	project := newProject(t, "Hospital")
	user := "User/" + newUser(t, email, "", "")
	newMembership(t, project, user, newPractitioner(t, project, "Bob", "Ext"), nil)
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]any{"domain": domain, "nonce": "expected"}
	withEmail := func(edit func(jwt.MapClaims)) func(jwt.MapClaims) {
		return func(c jwt.MapClaims) {
			c["email"] = email
			if edit != nil {
				edit(c)
			}
		}
	}
	for _, tc := range []struct {
		name string
		code string
	}{
		{"signed with another key", p.code(withEmail(nil), stranger)},
		{"for another audience", p.code(withEmail(func(c jwt.MapClaims) { c["aud"] = "someone-else" }), nil)},
		{"from another issuer", p.code(withEmail(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }), nil)},
		{"expired", p.code(withEmail(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }), nil)},
		{"for another sign-in (nonce)", p.code(withEmail(func(c jwt.MapClaims) { c["nonce"] = "replayed" }), nil)},
		{"a code the provider refuses", "not-a-code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := callback(tc.code, state)
			extRefused(t, resp, err, "Failed to verify code")
		})
	}
	// The same token, genuine, signs in.
	_, status := signedInLogin(callbackOK(t, p.code(withEmail(func(c jwt.MapClaims) { c["nonce"] = "expected" }), nil), state))
	if status["code"] == nil {
		t.Fatalf("login status %v", status)
	}
	// A provider without an issuer cannot be verified: refused, clearly.
	noIssuer := newDomain(t, p.idp(map[string]any{"issuer": nil}))
	resp, err := callback(p.code(nil, nil), map[string]any{"domain": noIssuer})
	extRefused(t, resp, err, "Identity provider has no issuer")
}

// callbackOK is callback for signedInLogin.
func callbackOK(t *testing.T, code string, state map[string]any) (*testing.T, *bus.Response, error) {
	resp, err := callback(code, state)
	return t, resp, err
}

func TestExternalSignInBySubjectForClient(t *testing.T) {
	p := newOIDCProvider(t)
	project := newProject(t, "Clinic")
	redirect := "https://app.example/callback"
	client := newResource(t, project, map[string]any{"resourceType": "ClientApplication", "name": "sso app",
		"redirectUris":     []any{redirect},
		"identityProvider": p.idp(map[string]any{"useSubject": true, "tokenAuthMethod": "client_secret_post", "jwksUrl": p.srv.URL + "/jwks"})})
	clientID := strings.TrimPrefix(client, "ClientApplication/")
	// The person's e-mail at the provider differs from Pinion's: the
	// subject is what matches.
	user := "User/" + newUser(t, newEmail("carol"), "", "")
	profile := newPractitioner(t, project, "Carol", "Ext")
	newMembership(t, project, user, profile, map[string]any{"externalId": "okta|carol"})
	// Another membership of the same person, without the subject: not chosen.
	other := newProject(t, "Elsewhere")
	newMembership(t, other, user, newPractitioner(t, other, "Carol", "Other"), nil)
	state := map[string]any{"clientId": clientID, "redirectUri": redirect, "codeChallenge": rfcChallenge, "codeChallengeMethod": "S256"}
	resp, err := callback(p.code(func(c jwt.MapClaims) { c["sub"] = "okta|carol"; c["email"] = "someone@else.example" }, nil), state)
	if err != nil || resp.Status != 302 {
		t.Fatalf("callback: %v %v", resp, err)
	}
	u, _ := url.Parse(resp.Header["Location"])
	if !strings.HasPrefix(u.String(), redirect+"?") || u.Query().Get("code") == "" {
		t.Fatalf("redirect to %s", u)
	}
	p.mu.Lock()
	form := p.seen[len(p.seen)-1]
	p.mu.Unlock()
	if form.Get("client_secret") != p.clientSecret {
		t.Fatalf("client_secret_post: token request %v", form)
	}
	tok := decoded(t, redeem(t, u.Query().Get("code")), nil, 200)
	if c := verify(t, tok["access_token"].(string), testBase); c.Profile != profile {
		t.Fatalf("token for %q, want %s", c.Profile, profile)
	}
	// An unknown subject, a redirect the client did not register, and a
	// project other than the client's.
	resp, err = callback(p.code(func(c jwt.MapClaims) { c["sub"] = "okta|mallory" }, nil), state)
	extRefused(t, resp, err, "User not found")
	bad := map[string]any{"clientId": clientID, "redirectUri": redirect + ".evil.example"}
	resp, err = callback(p.code(func(c jwt.MapClaims) { c["sub"] = "okta|carol" }, nil), bad)
	extRefused(t, resp, err, "Invalid redirect URI")
	resp, err = callback(p.code(func(c jwt.MapClaims) { c["sub"] = "okta|carol" }, nil), map[string]any{"clientId": clientID, "projectId": newProject(t, "other")})
	extRefused(t, resp, err, "Invalid project")
	// Malformed requests.
	resp, err = live.svc.federation.ExternalCallback(context.Background(), &bus.Request{Query: url.Values{"state": {"{}"}}})
	extRefused(t, resp, err, "Missing code")
	resp, err = live.svc.federation.ExternalCallback(context.Background(), &bus.Request{Query: url.Values{"code": {"x"}, "state": {"{not json"}}})
	extRefused(t, resp, err, "Invalid state")
	// A state that is not JSON is one Pinion's page keeps; unknown here.
	resp, err = live.svc.federation.ExternalCallback(context.Background(), &bus.Request{Query: url.Values{"code": {"x"}, "state": {"not json"}}})
	if err != nil || resp.Status != 400 || !strings.Contains(string(resp.Body), "Sign-in expired") {
		t.Fatalf("an unknown page state: %v %v", resp, err)
	}
	resp, err = callback("x", map[string]any{"domain": "no-provider.example"})
	extRefused(t, resp, err, "Identity provider not found")
}
