package identity

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/repo"
)

// googleKeys stands in for Google: its key set on loopback, and ID tokens
// shaped as Google Sign-In's credential.
type googleKeys struct {
	srv *httptest.Server
	key *rsa.PrivateKey
}

func newGoogleKeys(t *testing.T) *googleKeys {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	g := &googleKeys{key: key}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "g1", Algorithm: "RS256", Use: "sig"}}})
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// credential is an ID token for the audience and address (claims edited),
// signed with key (Google's when nil).
func (g *googleKeys) credential(t *testing.T, aud, email string, edit func(jwt.MapClaims), key *rsa.PrivateKey) string {
	t.Helper()
	now := time.Now()
	c := jwt.MapClaims{"iss": "https://accounts.google.com", "aud": aud, "sub": "1" + uuid.NewString()[:8], "email": email,
		"email_verified": true, "given_name": "Grace", "family_name": "Google", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if edit != nil {
		edit(c)
	}
	if key == nil {
		key = g.key
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, c)
	tok.Header["kid"] = "g1"
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// googleService is an identity instance whose Google is g, with this
// server client id.
func googleService(t *testing.T, g *googleKeys, clientID string, edit func(*Config)) *Service {
	cfg := live.svc.cfg
	cfg.GoogleClientID, cfg.GoogleJWKSURL = clientID, g.srv.URL
	if edit != nil {
		edit(&cfg)
	}
	return another(t, cfg)
}

func TestGoogleSignIn(t *testing.T) {
	ctx := context.Background()
	g := newGoogleKeys(t)
	serverID := "server-" + uuid.NewString()[:8] + ".apps.googleusercontent.com"
	s := googleService(t, g, serverID, nil)
	p := newPerson(t, "google")
	stranger, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	post := func(s *Service, body map[string]any) (map[string]any, error) {
		t.Helper()
		resp, err := s.federation.Google(ctx, jsonRequest("10.3.7.1", body))
		if err != nil {
			return nil, err
		}
		return decoded(t, resp, nil, 200), nil
	}
	signIn := func(cred string, extra map[string]any) (map[string]any, error) {
		body := map[string]any{"googleClientId": serverID, "googleCredential": cred, "codeChallenge": rfcChallenge, "codeChallengeMethod": "S256"}
		for k, v := range extra {
			body[k] = v
		}
		return post(s, body)
	}

	// A genuine credential signs the person in, either spelling of the issuer.
	for _, iss := range []string{"https://accounts.google.com", "accounts.google.com"} {
		out, err := signIn(g.credential(t, serverID, strings.ToUpper(p.email), func(c jwt.MapClaims) { c["iss"] = iss }, nil), nil)
		if err != nil {
			t.Fatalf("issuer %s: %v", iss, err)
		}
		code, _ := out["code"].(string)
		tok := decoded(t, redeem(t, code), nil, 200)
		if c := verify(t, tok["access_token"].(string), testBase); c.Profile != p.profile {
			t.Fatalf("token for %q, want %s", c.Profile, p.profile)
		}
	}

	for _, tc := range []struct {
		name, cred, text string
	}{
		{"for another audience", g.credential(t, "someone-else.apps.googleusercontent.com", p.email, nil, nil), "Invalid googleCredential"},
		{"expired", g.credential(t, serverID, p.email, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() }, nil), "Invalid googleCredential"},
		{"signed with another key", g.credential(t, serverID, p.email, nil, stranger), "Invalid googleCredential"},
		{"from another issuer", g.credential(t, serverID, p.email, func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }, nil), "Invalid googleCredential"},
		{"not a token", "not.a.token", "Invalid googleCredential"},
		{"an unverified address", g.credential(t, serverID, p.email, func(c jwt.MapClaims) { c["email_verified"] = false }, nil), "Google credential's email address is not verified"},
		{"an unknown user", g.credential(t, serverID, newEmail("nobody"), nil, nil), "User not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := signIn(tc.cred, nil)
			expectOutcome(t, err, 400, tc.text, "")
		})
	}
	_, err = post(s, map[string]any{"googleCredential": "x"})
	expectOutcome(t, err, 400, "Missing googleClientId", "googleClientId")
	_, err = post(s, map[string]any{"googleClientId": serverID})
	expectOutcome(t, err, 400, "Missing googleCredential", "googleCredential")
	// A client id neither the server's nor any project's.
	other := "other-" + uuid.NewString()[:8] + ".apps.googleusercontent.com"
	_, err = post(s, map[string]any{"googleClientId": other, "googleCredential": g.credential(t, other, p.email, nil, nil)})
	expectOutcome(t, err, 400, "Invalid googleClientId", "")

	// createUser makes the account, Google's names and verified address,
	// with no membership yet ({login}), when registration is on.
	email := newEmail("newgoogle")
	out, err := signIn(g.credential(t, serverID, email, nil, nil), map[string]any{"createUser": true, "projectId": "new"})
	if err != nil || len(out) != 1 || out["login"] == nil {
		t.Fatalf("createUser: %v %v", out, err)
	}
	uid, err := live.conns.Repo.ClaimOwner(ctx, repo.UserEmailKey("", email))
	if err != nil || uid == "" {
		t.Fatalf("no user for %s: %v", email, err)
	}
	if u := readJSON(t, "User", uid); u["firstName"] != "Grace" || u["emailVerified"] != true {
		t.Fatalf("user %v", u)
	}
	closed := googleService(t, g, serverID, func(c *Config) { c.RegisterDisabled = true })
	_, err = post(closed, map[string]any{"googleClientId": serverID, "createUser": true,
		"googleCredential": g.credential(t, serverID, newEmail("closed"), nil, nil)})
	expectOutcome(t, err, 400, "Registration is disabled", "")
}

// A project site's Google client id signs in to that project only; a
// domain with its own provider is sent there.
func TestGoogleSiteAndDomain(t *testing.T) {
	ctx := context.Background()
	g := newGoogleKeys(t)
	s := googleService(t, g, "", nil)
	p := newPerson(t, "googlesite")
	siteID := "site-" + uuid.NewString()[:8] + ".apps.googleusercontent.com"
	setProject(t, p.project, func(doc map[string]any) {
		doc["site"] = []any{map[string]any{"name": "portal", "domain": []any{"portal.example"}, "googleClientId": siteID}}
	})
	// The same person in another project: the site's id reaches only its own.
	elsewhere := newProject(t, "Elsewhere")
	newMembership(t, elsewhere, p.user, newPractitioner(t, elsewhere, "Ada", "Elsewhere"), nil)
	resp, err := s.federation.Google(ctx, jsonRequest("10.3.7.2", map[string]any{"googleClientId": siteID,
		"googleCredential": g.credential(t, siteID, p.email, nil, nil)}))
	out := decoded(t, resp, err, 200)
	if code, _ := out["code"].(string); code == "" {
		t.Fatalf("site sign-in: %v", out)
	}
	_, err = s.federation.Google(ctx, jsonRequest("10.3.7.2", map[string]any{"googleClientId": siteID, "projectId": elsewhere,
		"googleCredential": g.credential(t, siteID, p.email, nil, nil)}))
	expectOutcome(t, err, 400, "Invalid googleClientId", "")

	prov := newOIDCProvider(t)
	domain := newDomain(t, prov.idp(nil))
	resp, err = s.federation.Google(ctx, jsonRequest("10.3.7.2", map[string]any{"googleClientId": siteID,
		"googleCredential": g.credential(t, siteID, "ada@"+domain, nil, nil)}))
	out = decoded(t, resp, err, 200)
	if out["domain"] != domain || !strings.HasPrefix(out["authorizeUrl"].(string), prov.srv.URL+"/authorize?") {
		t.Fatalf("domain answer %v", out)
	}
}
