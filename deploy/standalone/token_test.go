package standalone

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/session"
)

func TestTokenClientCredentials(t *testing.T) {
	// An ID token comes only when openid is asked for (docs/oauth.md).
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {saID}, "client_secret": {saSec}, "scope": {"openid"}}
	r := do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 200)
	body := r.json(t)
	for _, k := range []string{"access_token", "token_type", "expires_in", "scope", "project", "profile", "id_token"} {
		if body[k] == nil {
			t.Errorf("token response lacks %s: %s", k, r.body)
		}
	}
	if body["refresh_token"] != nil {
		t.Error("super admin got a refresh token")
	}
	// Medplum's client shows the names (medplum whoami prints them).
	if body["project"].(map[string]any)["display"] != "Super Admin" || body["profile"].(map[string]any)["display"] != "Super Admin Client" {
		t.Errorf("token response without display names: %s", r.body)
	}
	// HTTP Basic works the same.
	basic := base64.StdEncoding.EncodeToString([]byte(saID + ":" + saSec))
	r = do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte("grant_type=client_credentials"), "Authorization", "Basic "+basic)
	expect(t, r, 200)

	me := do(t, "GET", "auth/me", body["access_token"].(string), "", nil)
	expect(t, me, 200)
	m := me.json(t)
	if m["profile"].(map[string]any)["resourceType"] != "ClientApplication" || m["project"].(map[string]any)["superAdmin"] != true {
		t.Fatalf("auth/me: %s", me.body)
	}
}

func TestTokenErrors(t *testing.T) {
	form := func(kv ...string) []byte {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return []byte(v.Encode())
	}
	const ct = "application/x-www-form-urlencoded"
	// RFC 6749 §5.2's codes, Medplum's texts; a client that failed to
	// authenticate is 401.
	cases := []struct {
		name, contentType string
		body              []byte
		hdr               []string
		status            int
		code, want        string
	}{
		{"json body", "application/json", []byte(`{"grant_type":"client_credentials"}`), nil, 400, "invalid_request", "Unsupported content type"},
		{"missing grant", ct, form(), nil, 400, "invalid_request", "Missing grant_type"},
		{"unknown grant", ct, form("grant_type", "password"), nil, 400, "unsupported_grant_type", "Unsupported grant_type"},
		{"jwt bearer grant", ct, form("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion", "x"), nil, 400, "unsupported_grant_type", "Unsupported grant_type"},
		{"missing client", ct, form("grant_type", "client_credentials"), nil, 400, "invalid_request", "Missing client_id"},
		{"missing secret", ct, form("grant_type", "client_credentials", "client_id", saID), nil, 400, "invalid_request", "Missing client_secret"},
		{"unknown client", ct, form("grant_type", "client_credentials", "client_id", "nope", "client_secret", "x"), nil, 401, "invalid_client", "Invalid client"},
		{"bad client id syntax", ct, form("grant_type", "client_credentials", "client_id", "../x", "client_secret", "x"), nil, 401, "invalid_client", "Invalid client"},
		{"wrong secret", ct, form("grant_type", "client_credentials", "client_id", saID, "client_secret", saSec+"x"), nil, 401, "invalid_client", "Invalid secret"},
		{"bearer header", ct, form("grant_type", "client_credentials"), []string{"Authorization", "Bearer x"}, 400, "invalid_request", "Invalid authorization header"},
		{"unknown code", ct, form("grant_type", "authorization_code", "code", "x.y"), nil, 400, "invalid_grant", "Invalid code"},
		{"missing code", ct, form("grant_type", "authorization_code"), nil, 400, "invalid_request", "Missing code"},
		{"client assertion", ct, form("grant_type", "client_credentials", "client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer", "client_assertion", "x.y.z"), nil, 401, "invalid_client", "Invalid client assertion"},
		{"forged refresh token", ct, form("grant_type", "refresh_token", "refresh_token", "x"), nil, 400, "invalid_grant", "Invalid refresh token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, "POST", "oauth2/token", "", tc.contentType, tc.body, tc.hdr...)
			expect(t, r, tc.status)
			m := r.json(t)
			if m["error"] != tc.code || m["error_description"] != tc.want {
				t.Fatalf("%v %q, want %s %q", m["error"], m["error_description"], tc.code, tc.want)
			}
			if tc.status == 401 && r.header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without a challenge")
			}
		})
	}
}

// serverKey reads the real signing key from the store, to make tokens that
// are validly signed but wrong in another way.
func serverKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	var d struct {
		Kid string `json:"kid"`
		PEM string `json:"pem"`
	}
	raw, err := stack.conns.Store.Secret(context.Background(), "signing-key")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	k, err := auth.ParsePrivate(d.Kid, d.PEM)
	if err != nil {
		t.Fatal(err)
	}
	return k.Private
}

func TestForgedTokensAreRefused(t *testing.T) {
	good := superToken(t)
	expect(t, do(t, "GET", "auth/me", good, "", nil), 200)

	parts := strings.Split(good, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	claims := jwt.MapClaims{}
	tok, _, err := jwt.NewParser().ParseUnverified(good, claims)
	if err != nil {
		t.Fatal(err)
	}
	hdrKid, _ := tok.Header["kid"].(string)
	server := serverKey(t)

	// The server's public key, from JWKS, as an attacker would fetch it.
	jwks := do(t, "GET", ".well-known/jwks.json", "", "", nil)
	expect(t, jwks, 200)
	k := jwks.json(t)["keys"].([]any)[0].(map[string]any)
	x, _ := base64.RawURLEncoding.DecodeString(k["x"].(string))
	y, _ := base64.RawURLEncoding.DecodeString(k["y"].(string))
	pubDER, _ := x509.MarshalPKIXPublicKey(&ecdsa.PublicKey{Curve: elliptic.P256(), X: newInt(x), Y: newInt(y)})
	attacker, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)

	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims, kid string) string {
		tok := jwt.NewWithClaims(m, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range claims {
			c[kk] = vv
		}
		c[k] = v
		return c
	}
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(payload), `"scope":"openid"`, `"scope":"openid admin"`, 1))) + "." + parts[2]
	cases := map[string]string{
		"alg none":                 sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims, hdrKid),
		"HS256 with public key":    sign(jwt.SigningMethodHS256, pubDER, claims, hdrKid),
		"attacker key, server kid": sign(jwt.SigningMethodES256, attacker, claims, hdrKid),
		"attacker key, other kid":  sign(jwt.SigningMethodES256, attacker, claims, "attacker"),
		"no kid":                   sign(jwt.SigningMethodES256, attacker, claims, ""),
		"expired":                  sign(jwt.SigningMethodES256, server, with("exp", time.Now().Add(-time.Hour).Unix()), hdrKid),
		"not yet valid":            sign(jwt.SigningMethodES256, server, with("nbf", time.Now().Add(time.Hour).Unix()), hdrKid),
		"wrong issuer":             sign(jwt.SigningMethodES256, server, with("iss", "http://evil.example/"), hdrKid),
		"wrong audience":           sign(jwt.SigningMethodES256, server, with("aud", "http://evil.example/"), hdrKid),
		"unknown login":            sign(jwt.SigningMethodES256, server, with("login_id", "00000000-0000-0000-0000-000000000000"), hdrKid),
		"real key, RS-style alg":   strings.Replace(sign(jwt.SigningMethodES256, server, claims, hdrKid), parts[0], base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"ES384","kid":"`+hdrKid+`","typ":"JWT"}`)), 1),
		"tampered payload":         tampered,
		"truncated signature":      good[:len(good)-4],
		"not a JWT":                "hello",
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			r := do(t, "GET", "auth/me", tok, "", nil)
			expect(t, r, 401)
			if r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if got := r.outcomeText(t); got != "Unauthorized" {
				t.Errorf("text %q", got)
			}
		})
	}
	t.Run("missing header", func(t *testing.T) { expect(t, do(t, "GET", "fhir/R4/Patient", "", "", nil), 401) })
	t.Run("basic scheme", func(t *testing.T) {
		expect(t, do(t, "GET", "fhir/R4/Patient", "", "", nil, "Authorization", "Basic eDp5"), 401)
	})
}

// Signing out one client-credentials token ends that token only.
func TestClientLogoutEndsOneToken(t *testing.T) {
	a, b := superToken(t), superToken(t)
	expect(t, do(t, "POST", "oauth2/logout", a, "application/json", []byte("{}")), 200)
	expect(t, do(t, "GET", "auth/me", a, "", nil), 401)
	expect(t, do(t, "GET", "auth/me", b, "", nil), 200)
	expect(t, do(t, "GET", "auth/me", superToken(t), "", nil), 200)
}

// Only access tokens open the API: the ID token and the refresh token of
// the same sign-in are signed by the same key and name the same login.
func TestOnlyAccessTokensOpenTheAPI(t *testing.T) {
	pid, su := adminProject(t, "token kinds")
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Tok", "lastName", "Kinds",
		"email", "token-kinds@example.com", "password", "token kinds password")
	tokens := signIn(t, "token-kinds@example.com", "token kinds password", pid, "openid offline_access")
	expect(t, do(t, "GET", "auth/me", tokens["access_token"].(string), "", nil), 200)
	for _, kind := range []string{"id_token", "refresh_token"} {
		tok, _ := tokens[kind].(string)
		if tok == "" {
			t.Fatalf("no %s issued", kind)
		}
		expect(t, do(t, "GET", "auth/me", tok, "", nil), 401)
		expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 401)
	}
}

// An authorization code is good for a minute; redeeming it later is
// refused, and the login can still be used by nothing.
func TestAuthorizationCodeExpires(t *testing.T) {
	pid, su := adminProject(t, "code expiry")
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Code", "lastName", "Late",
		"email", "code-late@example.com", "password", "code late password")
	verifier := "verifier-" + strings.Repeat("y", 40)
	r := do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
		"email": "code-late@example.com", "password": "code late password", "projectId": pid,
		"codeChallenge": verifier, "codeChallengeMethod": "plain"}))
	expect(t, r, 200)
	code := r.json(t)["code"].(string)
	loginID, _, _ := strings.Cut(code, ".")
	// Age the code past its lifetime, as if the client had waited.
	if _, err := stack.conns.Sessions.UpdateLogin(context.Background(), loginID, func(l *session.Login) error {
		l.CodeAt -= (61 * time.Second).Milliseconds()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "code_verifier": {verifier}}
	r = do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	expect(t, r, 400)
	if m := r.json(t); m["error"] != "invalid_grant" || m["error_description"] != "Code expired" {
		t.Fatalf("late code: %s", r.body)
	}
}

// A sign-in for an unknown e-mail is answered like one with a wrong
// password: the same status and text, and the same password check, so
// neither the answer nor its time tells which addresses have accounts.
func TestSignInAnswersAlike(t *testing.T) {
	pid, su := adminProject(t, "sign-in alike")
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Al", "lastName", "Ike",
		"email", "alike@example.com", "password", "the right password")
	attempt := func(email string) (*response, time.Duration) {
		start := time.Now()
		r := do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
			"email": email, "password": "a wrong password", "codeChallenge": "x", "codeChallengeMethod": "plain"}))
		return r, time.Since(start)
	}
	// Interleaved, after a first attempt of each; the fastest of five is the
	// cost, the rest is this machine's noise.
	attempt("alike@example.com")
	attempt("nobody-alike@example.com")
	var known, unknown time.Duration
	var knownText, unknownText string
	for i := 0; i < 5; i++ {
		for _, email := range []string{"alike@example.com", "nobody-alike@example.com"} {
			r, d := attempt(email)
			expect(t, r, 400)
			if email == "alike@example.com" {
				knownText, known = r.outcomeText(t), minPositive(known, d)
			} else {
				unknownText, unknown = r.outcomeText(t), minPositive(unknown, d)
			}
		}
	}
	t.Logf("wrong password %v %q; unknown e-mail %v %q", known, knownText, unknown, unknownText)
	if knownText != unknownText || knownText != "Email or password is invalid" {
		t.Fatalf("answers differ: %q and %q", knownText, unknownText)
	}
	// The password check dominates both; without it the unknown e-mail
	// answers some thirty times faster.
	if unknown < known/3 {
		t.Fatalf("an unknown e-mail is answered in %v, a wrong password in %v", unknown, known)
	}
}

func minPositive(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// Whoever guesses passwords is stopped, not the account's owner: failures
// count per (e-mail, client address) and per address, the address read
// through a trusted proxy's X-Forwarded-For.
func TestSignInLimiter(t *testing.T) {
	parallelIn(t, ownStacks)
	parallelStack(t, map[string]string{"PINION_TRUSTED_PROXIES": "127.0.0.1"})
	pid, su := adminProject(t, "guessing")
	member(t, su, pid, "resourceType", "Practitioner", "firstName", "Vic", "lastName", "Tim",
		"email", "victim@example.com", "password", "the victim's password")
	login := func(email, password, from string) int {
		return do(t, "POST", "auth/login", "", "application/json", mustJSON(map[string]any{
			"email": email, "password": password, "codeChallenge": "x", "codeChallengeMethod": "plain"}),
			"X-Forwarded-For", from).status
	}
	for i := 0; i < 10; i++ {
		if st := login("victim@example.com", "a wrong guess", "203.0.113.7"); st != 400 {
			t.Fatalf("guess %d: %d", i, st)
		}
	}
	if st := login("victim@example.com", "the victim's password", "203.0.113.7"); st != 429 {
		t.Fatalf("the guessing address: %d, want 429", st)
	}
	if st := login("victim@example.com", "the victim's password", "198.51.100.2"); st != 200 {
		t.Fatalf("the owner from another address: %d, want 200", st)
	}
	// An address spraying many accounts is stopped; its neighbour is not.
	for i := 0; i < 50; i++ {
		login(fmt.Sprintf("sprayed-%d@example.com", i), "a wrong guess", "203.0.113.8")
	}
	if st := login("victim@example.com", "the victim's password", "203.0.113.8"); st != 429 {
		t.Fatalf("the spraying address: %d, want 429", st)
	}
	if st := login("victim@example.com", "the victim's password", "203.0.113.9"); st != 200 {
		t.Fatalf("another address: %d, want 200", st)
	}

	// HTTP Basic on the API counts failures the same way, per client.
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", []byte(`{"name":"guessed"}`))
	expect(t, r, 201)
	id, secret := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	read := func(secret, from string) int {
		return do(t, "GET", "fhir/R4/Patient", "", "", nil, "Authorization", basic(id, secret), "X-Forwarded-For", from).status
	}
	for i := 0; i < 10; i++ {
		if st := read("a wrong guess", "203.0.113.10"); st != 401 {
			t.Fatalf("basic guess %d: %d", i, st)
		}
	}
	if st := read(secret, "203.0.113.10"); st != 429 {
		t.Fatalf("the guessing address with the right secret: %d, want 429", st)
	}
	if st := read(secret, "198.51.100.3"); st != 200 {
		t.Fatalf("the client from another address: %d, want 200", st)
	}
}

// basic is the Authorization header of a client's id and secret.
func basic(id, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(id+":"+secret))
}

// A client's id and secret work as HTTP Basic on the API, as in Medplum,
// with the token endpoint's checks.
func TestBasicAuth(t *testing.T) {
	pid, su := adminProject(t, "basic auth")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", []byte(`{"name":"basic client"}`))
	expect(t, r, 201)
	id, secret := r.json(t)["id"].(string), r.json(t)["secret"].(string)
	call := func(method, path, auth string, body []byte) *response {
		ct := ""
		if body != nil {
			ct = "application/fhir+json"
		}
		return do(t, method, path, "", ct, body, "Authorization", auth)
	}
	r = call("POST", "fhir/R4/Patient", basic(id, secret), patient("Basic"))
	expect(t, r, 201)
	p := r.json(t)
	if author := p["meta"].(map[string]any)["author"].(map[string]any)["reference"]; author != "ClientApplication/"+id {
		t.Fatalf("author %v", author)
	}
	if p["meta"].(map[string]any)["project"] != pid {
		t.Fatalf("written outside the client's project: %s", r.body)
	}
	expect(t, call("GET", "fhir/R4/Patient/"+p["id"].(string), basic(id, secret), nil), 200)
	r = call("GET", "auth/me", basic(id, secret), nil)
	expect(t, r, 200)
	if r.json(t)["project"].(map[string]any)["id"] != pid {
		t.Fatalf("me: %s", r.body)
	}
	for name, auth := range map[string]string{
		"wrong secret":   basic(id, secret+"x"),
		"unknown client": basic("00000000-0000-0000-0000-000000000000", secret),
		"no secret":      basic(id, ""),
		"not base64":     "Basic %%%",
		"no colon":       "Basic " + base64.StdEncoding.EncodeToString([]byte(id)),
		"oversize":       "Basic " + strings.Repeat("A", 2000),
	} {
		r := call("GET", "fhir/R4/Patient", auth, nil)
		expect(t, r, 401)
		if r.outcomeText(t) != "Unauthorized" {
			t.Errorf("%s: %s", name, r.body)
		}
	}
	// Logging out by Basic ends nothing (there is no token), and breaks nothing.
	expect(t, call("POST", "oauth2/logout", basic(id, secret), nil), 200)
	expect(t, call("GET", "fhir/R4/Patient", basic(id, secret), nil), 200)
	// A client whose membership ends is refused at once.
	r = do(t, "GET", "fhir/R4/ProjectMembership?profile=ClientApplication/"+id, su, "", nil)
	_, entries := bundleOf(t, r)
	expect(t, do(t, "DELETE", "admin/projects/"+pid+"/members/"+entries[0]["id"].(string), su, "", nil), 200)
	expect(t, call("GET", "fhir/R4/Patient", basic(id, secret), nil), 401)
}

// jwksServer publishes keys as a client's jwksUri, on loopback.
func jwksServer(t *testing.T, keys ...jose.JSONWebKey) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: keys})
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/jwks.json"
}

// A client proves itself with a JWT signed by a key it publishes
// (private_key_jwt, RFC 7523), as SMART Backend Services do.
func TestClientAssertion(t *testing.T) {
	pid, su := adminProject(t, "assertions")
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	uri := jwksServer(t, jose.JSONWebKey{Key: key.Public(), KeyID: "k1", Algorithm: "RS384", Use: "sig"})
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "backend", "jwksUri": uri}))
	expect(t, r, 201)
	id := r.json(t)["id"].(string)
	r = do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", mustJSON(map[string]any{"name": "no keys"}))
	expect(t, r, 201)
	keyless := r.json(t)["id"].(string)

	aud := config.DeriveBaseURL(stack.Addr) + "oauth2/token"
	sign := func(k *rsa.PrivateKey, kid string, claims jwt.MapClaims) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS384, claims)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	n := 0
	claims := func(iss string, edit func(jwt.MapClaims)) jwt.MapClaims {
		n++
		c := jwt.MapClaims{"iss": iss, "sub": iss, "aud": aud, "exp": time.Now().Add(4 * time.Minute).Unix(), "jti": fmt.Sprint("assertion-", n)}
		if edit != nil {
			edit(c)
		}
		return c
	}
	grant := func(assertion string) *response {
		form := url.Values{"grant_type": {"client_credentials"}, "client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"}, "client_assertion": {assertion}}
		return do(t, "POST", "oauth2/token", "", "application/x-www-form-urlencoded", []byte(form.Encode()))
	}
	good := sign(key, "k1", claims(id, nil))
	r = grant(good)
	expect(t, r, 200)
	tok := r.json(t)["access_token"].(string)
	if r := do(t, "GET", "auth/me", tok, "", nil); r.json(t)["profile"].(map[string]any)["id"] != id {
		t.Fatalf("the token is not the client's: %s", r.body)
	}
	expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 200)
	// Without a kid every published key is tried.
	expect(t, grant(sign(key, "", claims(id, nil))), 200)

	for name, c := range map[string]struct{ assertion, text string }{
		"replayed":          {good, "Client assertion already used"},
		"another key":       {sign(other, "k1", claims(id, nil)), "Invalid client assertion signature"},
		"unknown kid":       {sign(key, "k9", claims(id, nil)), "Invalid client assertion signature"},
		"wrong audience":    {sign(key, "k1", claims(id, func(c jwt.MapClaims) { c["aud"] = "https://elsewhere.example/token" })), "Invalid client assertion audience"},
		"expired":           {sign(key, "k1", claims(id, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), "Invalid client assertion signature"},
		"too long":          {sign(key, "k1", claims(id, func(c jwt.MapClaims) { c["exp"] = time.Now().Add(time.Hour).Unix() })), "Client assertion must expire within 5 minutes"},
		"no jti":            {sign(key, "k1", claims(id, func(c jwt.MapClaims) { delete(c, "jti") })), "Client assertion has no jti"},
		"subject differs":   {sign(key, "k1", claims(id, func(c jwt.MapClaims) { c["sub"] = "someone" })), "Invalid client assertion issuer"},
		"unknown client":    {sign(key, "k1", claims("00000000-0000-0000-0000-000000000000", nil)), "Invalid client"},
		"client has no key": {sign(key, "k1", claims(keyless, nil)), "Client must have a JWK Set URL"},
		"not a JWT":         {"not.a.jwt", "Invalid client assertion"},
	} {
		r := grant(c.assertion)
		expect(t, r, 401)
		if m := r.json(t); m["error"] != "invalid_client" || m["error_description"] != c.text {
			t.Errorf("%s: %s", name, r.body)
		}
	}
	// HMAC with the JWK as a secret, or no signature: never.
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims(id, nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	expect(t, grant(none), 401)
}
