package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/limits"
)

const testBase = "https://pinion.example/"

// unwired is the service without NATS, sessions or a database: what it
// answers, it answers before looking anything up (a lookup would panic).
func unwired(t *testing.T) *Service {
	t.Helper()
	key, err := auth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{BaseURL: testBase}, nil, nil, nil, nil, nil)
	s.signer = &auth.Signer{Key: key, Issuer: testBase}
	return s
}

// expectTokenError checks an answer of the token endpoint: RFC 6749
// §5.2's shape, 401 with a Basic challenge for invalid_client.
func expectTokenError(t *testing.T, resp *bus.Response, status int, code, text string) {
	t.Helper()
	var body map[string]string
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatalf("body %s: %v", resp.Body, err)
	}
	if resp.Status != status || body["error"] != code || body["error_description"] != text || len(body) != 2 {
		t.Fatalf("%d %s, want %d %s %q", resp.Status, resp.Body, status, code, text)
	}
	wantChallenge := ""
	if status == 401 {
		wantChallenge = `Basic realm="token"`
	}
	if got := resp.Header["WWW-Authenticate"]; got != wantChallenge {
		t.Fatalf("WWW-Authenticate %q, want %q", got, wantChallenge)
	}
	if resp.Header["Cache-Control"] != "no-store" || resp.Header["Content-Type"] != bus.JSONContentType {
		t.Fatalf("headers %v", resp.Header)
	}
}

func TestTokenError(t *testing.T) {
	cases := []struct {
		code, text string
		status     int
	}{
		{"invalid_request", "Missing code", 400},
		{"invalid_grant", "Invalid code", 400},
		{"unsupported_grant_type", "Unsupported grant_type", 400},
		{"unauthorized_client", "Profile not active", 400},
		{"invalid_client", "Invalid client", 401},
		{"invalid_client", "Invalid secret", 401},
	}
	for _, tc := range cases {
		t.Run(tc.code+" "+tc.text, func(t *testing.T) {
			expectTokenError(t, tokenError(tc.code, tc.text), tc.status, tc.code, tc.text)
			expectTokenError(t, (&refusal{code: tc.code, text: tc.text}).response(), tc.status, tc.code, tc.text)
			if got := (&refusal{code: tc.code, text: tc.text}).Error(); got != tc.code+": "+tc.text {
				t.Fatalf("error text %q", got)
			}
		})
	}
}

func basic(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }

func TestClientAuth(t *testing.T) {
	form := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	cases := []struct {
		name       string
		header     string
		form       url.Values
		id, secret string
		code, text string
	}{
		{name: "form", form: form("client_id", "app", "client_secret", "s3cret"), id: "app", secret: "s3cret"},
		{name: "basic", header: basic("app:s3cret"), form: form(), id: "app", secret: "s3cret"},
		{name: "basic, form-encoded halves", header: basic("my%3Aapp:a%2Bb%20c"), id: "my:app", secret: "a+b c"},
		{name: "basic, a plus is a space", header: basic("app:a+b"), id: "app", secret: "a b"},
		{name: "basic, a colon in the secret", header: basic("app:s:e:c"), id: "app", secret: "s:e:c"},
		{name: "the header wins over the form", header: basic("app:s3cret"),
			form: form("client_id", "other", "client_secret", "other-secret"), id: "app", secret: "s3cret"},
		{name: "the form is not read to fill a half the header lacks", header: basic("app:"),
			form: form("client_secret", "s3cret"), code: "invalid_request", text: "Missing client_secret"},
		{name: "bearer header", header: "Bearer abc", form: form("client_id", "app", "client_secret", "s3cret"),
			code: "invalid_request", text: "Invalid authorization header"},
		{name: "lower-case scheme", header: "basic " + base64.StdEncoding.EncodeToString([]byte("app:s3cret")),
			code: "invalid_request", text: "Invalid authorization header"},
		{name: "scheme alone", header: "Basic", code: "invalid_request", text: "Invalid authorization header"},
		{name: "not base64", header: "Basic !!!", code: "invalid_request", text: "Invalid authorization header"},
		{name: "unpadded base64", header: "Basic " + base64.RawStdEncoding.EncodeToString([]byte("app:s3cret")),
			code: "invalid_request", text: "Invalid authorization header"},
		{name: "basic without a colon", header: basic("app"), code: "invalid_request", text: "Missing client_secret"},
		{name: "basic without an id", header: basic(":s3cret"), code: "invalid_request", text: "Missing client_id"},
		{name: "basic, empty credentials", header: "Basic ", code: "invalid_request", text: "Missing client_id"},
		{name: "basic, a bad escape in the id reads as none", header: basic("a%zz:s3cret"),
			code: "invalid_request", text: "Missing client_id"},
		{name: "basic, a bad escape in the secret reads as none", header: basic("app:%"),
			code: "invalid_request", text: "Missing client_secret"},
		{name: "nothing", form: form(), code: "invalid_request", text: "Missing client_id"},
		{name: "form without a secret", form: form("client_id", "app"), code: "invalid_request", text: "Missing client_secret"},
		{name: "form without an id", form: form("client_secret", "s3cret"), code: "invalid_request", text: "Missing client_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, secret, no := clientAuth(tc.header, tc.form)
			expectRefusal(t, no, tc.code, tc.text)
			if id != tc.id || secret != tc.secret {
				t.Fatalf("read %q %q, want %q %q", id, secret, tc.id, tc.secret)
			}
		})
	}
}

// The token endpoint's refusals that need no lookup: the content type, the
// grant, the client's credentials as sent, and the code or refresh token as
// sent. Texts and codes are Medplum's (deploy/standalone TestTokenErrors
// checks the same over HTTP).
func TestTokenRefusesMalformedRequests(t *testing.T) {
	s := unwired(t)
	const form = "application/x-www-form-urlencoded"
	sign := func(c *auth.Claims, lifetime time.Duration) string {
		t.Helper()
		tok, err := s.signer.Sign(c, lifetime)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	refreshClaims := func(edit func(*auth.Claims)) *auth.Claims {
		c := &auth.Claims{LoginID: "l1", RefreshSecret: "r1"}
		c.Audience = jwt.ClaimStrings{testBase}
		if edit != nil {
			edit(c)
		}
		return c
	}
	otherKey, err := auth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	otherKey.ID = s.signer.Key.ID // the same kid, another key
	forged, err := (&auth.Signer{Key: otherKey, Issuer: testBase}).Sign(refreshClaims(nil), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	unsigned := func(c jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte("not the client's key"))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	v := func(kv ...string) string {
		q := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		return q.Encode()
	}
	cases := []struct {
		name, contentType, body string
		header                  map[string]string
		status                  int
		code, text              string
	}{
		{"json body", "application/json", `{"grant_type":"client_credentials"}`, nil, 400, "invalid_request", "Unsupported content type"},
		{"no content type", "", v("grant_type", "client_credentials"), nil, 400, "invalid_request", "Unsupported content type"},
		{"multipart", "multipart/form-data; boundary=x", v("grant_type", "client_credentials"), nil, 400, "invalid_request", "Unsupported content type"},
		{"unparsable form", form, "grant_type=%zz", nil, 400, "invalid_request", "Could not parse form"},
		{"missing grant", form, "", nil, 400, "invalid_request", "Missing grant_type"},
		{"content type in capitals, with a charset", "Application/X-WWW-Form-Urlencoded; charset=UTF-8", "", nil, 400, "invalid_request", "Missing grant_type"},
		{"password grant", form, v("grant_type", "password"), nil, 400, "unsupported_grant_type", "Unsupported grant_type"},
		{"jwt bearer grant", form, v("grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion", "x"), nil, 400, "unsupported_grant_type", "Unsupported grant_type"},
		{"grant in capitals", form, v("grant_type", "CLIENT_CREDENTIALS"), nil, 400, "unsupported_grant_type", "Unsupported grant_type"},
		{"missing client", form, v("grant_type", "client_credentials"), nil, 400, "invalid_request", "Missing client_id"},
		{"missing secret", form, v("grant_type", "client_credentials", "client_id", "app"), nil, 400, "invalid_request", "Missing client_secret"},
		{"bearer header", form, v("grant_type", "client_credentials"), map[string]string{"Authorization": "Bearer x"}, 400, "invalid_request", "Invalid authorization header"},
		{"basic without a secret", form, v("grant_type", "client_credentials"), map[string]string{"Authorization": basic("app")}, 400, "invalid_request", "Missing client_secret"},
		{"assertion without its type", form, v("grant_type", "client_credentials", "client_assertion", "x.y.z"), nil, 401, "invalid_client", "Unsupported client assertion type"},
		{"assertion of another type", form, v("grant_type", "client_credentials", "client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:saml2-bearer", "client_assertion", "x"), nil, 401, "invalid_client", "Unsupported client assertion type"},
		{"assertion type without an assertion", form, v("grant_type", "client_credentials", "client_assertion_type", jwtBearerAssertion), nil, 401, "invalid_client", "Invalid client assertion"},
		{"assertion not a JWT", form, v("grant_type", "client_credentials", "client_assertion_type", jwtBearerAssertion, "client_assertion", "x.y.z"), nil, 401, "invalid_client", "Invalid client assertion"},
		{"assertion about another subject", form, v("grant_type", "client_credentials", "client_assertion_type", jwtBearerAssertion,
			"client_assertion", unsigned(jwt.MapClaims{"iss": "app", "sub": "someone"})), nil, 401, "invalid_client", "Invalid client assertion issuer"},
		{"assertion without an issuer", form, v("grant_type", "client_credentials", "client_assertion_type", jwtBearerAssertion,
			"client_assertion", unsigned(jwt.MapClaims{"sub": "app"})), nil, 401, "invalid_client", "Invalid client assertion issuer"},
		{"an assertion beats a secret", form, v("grant_type", "client_credentials", "client_id", "app", "client_secret", "s3cret",
			"client_assertion_type", jwtBearerAssertion, "client_assertion", "x"), nil, 401, "invalid_client", "Invalid client assertion"},
		{"missing code", form, v("grant_type", "authorization_code"), nil, 400, "invalid_request", "Missing code"},
		{"code without its login", form, v("grant_type", "authorization_code", "code", "secret"), nil, 400, "invalid_grant", "Invalid code"},
		{"missing refresh token", form, v("grant_type", "refresh_token"), nil, 400, "invalid_request", "Invalid refresh token"},
		{"refresh token not a JWT", form, v("grant_type", "refresh_token", "refresh_token", "x"), nil, 400, "invalid_grant", "Invalid refresh token"},
		{"refresh token under another key", form, v("grant_type", "refresh_token", "refresh_token", forged), nil, 400, "invalid_grant", "Invalid refresh token"},
		{"access token as refresh token", form, v("grant_type", "refresh_token", "refresh_token",
			sign(refreshClaims(func(c *auth.Claims) { c.RefreshSecret = "" }), time.Hour)), nil, 400, "invalid_grant", "Invalid refresh token"},
		{"refresh token without a login", form, v("grant_type", "refresh_token", "refresh_token",
			sign(refreshClaims(func(c *auth.Claims) { c.LoginID = "" }), time.Hour)), nil, 400, "invalid_grant", "Invalid refresh token"},
		{"refresh token for another audience", form, v("grant_type", "refresh_token", "refresh_token",
			sign(refreshClaims(func(c *auth.Claims) { c.Audience = jwt.ClaimStrings{"app"} }), time.Hour)), nil, 400, "invalid_grant", "Invalid refresh token"},
		{"expired refresh token", form, v("grant_type", "refresh_token", "refresh_token",
			sign(refreshClaims(nil), -time.Minute)), nil, 400, "invalid_grant", "Invalid refresh token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{"Content-Type": tc.contentType}
			for k, v := range tc.header {
				h[k] = v
			}
			resp, err := s.token(context.Background(), &bus.Request{Method: "POST", Header: h, Body: []byte(tc.body)})
			if err != nil {
				t.Fatal(err)
			}
			expectTokenError(t, resp, tc.status, tc.code, tc.text)
		})
	}
}

// HTTP Basic on the API: a request without both halves is a plain 401,
// before any lookup or count.
func TestBasicRefusesIncompleteCredentials(t *testing.T) {
	s := unwired(t)
	for name, body := range map[string]string{
		"not JSON":  "app:s3cret",
		"no id":     `{"secret":"s3cret"}`,
		"no secret": `{"id":"app"}`,
		"empty":     `{}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := s.basic(context.Background(), &bus.Request{Body: []byte(body), Remote: "10.0.0.1"})
			if fe := fhir.AsError(err); fe.Status != 401 || fe.Message() != "Unauthorized" {
				t.Fatalf("%v, want 401 Unauthorized", err)
			}
		})
	}
	if n := s.limiter.Keys(); n != 0 {
		t.Fatalf("%d failures counted for requests that named no client", n)
	}
}

// HTTP Basic counts refused clients against the sign-in limiter, per
// client and address, and says only 401.
func TestBasicCountsFailures(t *testing.T) {
	s := live.svc
	body := []byte(`{"id":"` + uuid.NewString() + `","secret":"guess"}`)
	call := func(remote string) error {
		_, err := s.basic(context.Background(), &bus.Request{Body: body, Remote: remote})
		return err
	}
	for i := 0; i < limits.MaxFailures; i++ {
		if fe := fhir.AsError(call("10.77.0.1")); fe.Status != 401 || fe.Message() != "Unauthorized" {
			t.Fatalf("attempt %d: %v", i+1, fe)
		}
	}
	if fe := fhir.AsError(call("10.77.0.1")); fe.Status != 429 {
		t.Fatalf("after %d failures: %v", limits.MaxFailures, fe)
	}
	if fe := fhir.AsError(call("10.77.0.2")); fe.Status != 401 {
		t.Fatalf("another address is refused for this one's failures: %v", fe)
	}
}

// A grant refuses with an error; the token endpoint alone turns it into
// the OAuth answer (with the revocation's session revision when the
// refusal wrote one), and a request it refuses before any lookup needs
// nothing wired.
func TestTokenEndpointAnswersRefusals(t *testing.T) {
	s := &Service{}
	for _, tc := range []struct {
		ct, body   string
		code, text string
	}{
		{"application/json", `{}`, "invalid_request", "Unsupported content type"},
		{"application/x-www-form-urlencoded", "a=%zz", "invalid_request", "Could not parse form"},
		{"application/x-www-form-urlencoded", "scope=openid", "invalid_request", "Missing grant_type"},
		{"application/x-www-form-urlencoded", "grant_type=password", "unsupported_grant_type", "Unsupported grant_type"},
		{"application/x-www-form-urlencoded", "grant_type=authorization_code", "invalid_request", "Missing code"},
		{"application/x-www-form-urlencoded", "grant_type=refresh_token", "invalid_request", "Invalid refresh token"},
		{"application/x-www-form-urlencoded", "grant_type=client_credentials&client_id=x", "invalid_request", "Missing client_secret"},
	} {
		r := &bus.Request{Header: map[string]string{"Content-Type": tc.ct}, Body: []byte(tc.body)}
		resp, err := s.token(context.Background(), r)
		if err != nil {
			t.Fatalf("%s: a refusal came back as an error: %v", tc.body, err)
		}
		expectTokenError(t, resp, 400, tc.code, tc.text)
		if _, _, ok := resp.Session(); ok {
			t.Errorf("%s: a refusal that wrote nothing waits for a session revision", tc.body)
		}
	}
	resp := (&refusal{code: "invalid_grant", text: "Token revoked"}).revoked(42).response()
	if bucket, rev, ok := resp.Session(); !ok || rev != 42 || bucket != "pinion_logins" {
		t.Fatalf("a revoking refusal's answer waits for %q %d %v, want pinion_logins 42", bucket, rev, ok)
	}
}

// cachedClient is what the live service knows of a client.
func cachedClient(t *testing.T, id string) *clients.Client {
	t.Helper()
	c, err := live.svc.clients.Get(context.Background(), id)
	if err != nil || c == nil {
		t.Fatalf("client %s: %v %v", id, c, err)
	}
	return c
}

// A client's token: who it is, for which project, and an ID token when
// openid is asked for. The secret may come in the form too.
func TestClientCredentials(t *testing.T) {
	project := newProject(t, "Machines")
	id, secret := newClient(t, project, map[string]any{"name": "Machine"})
	ref := "ClientApplication/" + id

	resp := clientToken(t, id, secret, "10.2.0.1", nil)
	body := decoded(t, resp, nil, 200)
	if body["token_type"] != "Bearer" || body["expires_in"] != 600.0 || body["scope"] != "openid" ||
		resp.Header["Cache-Control"] != "no-store" || resp.Header["Pragma"] != "no-cache" {
		t.Fatalf("answer %v %v", body, resp.Header)
	}
	if got, want := body["profile"], map[string]any{"reference": ref, "display": "Machine"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("profile %v, want %v", got, want)
	}
	if got, want := body["project"], map[string]any{"reference": "Project/" + project, "display": "Machines"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("project %v, want %v", got, want)
	}
	access := verify(t, body["access_token"].(string), testBase)
	c := cachedClient(t, id)
	if !access.IsAccessToken() || access.Subject != id || access.Username != id || access.Profile != ref ||
		access.ClientID != id || access.LoginID != c.LoginID {
		t.Fatalf("access token %+v", access)
	}
	if l, err := live.conns.Sessions.GetLogin(context.Background(), c.LoginID); err != nil || l.Membership != c.Membership || l.User != ref {
		t.Fatalf("the client's login %+v %v", l, err)
	}
	// The default scope, openid, labels the login; it asks for no ID token.
	if body["id_token"] != nil {
		t.Fatalf("an ID token nobody asked for: %v", body)
	}
	body = decoded(t, clientToken(t, id, secret, "10.2.0.1", url.Values{"scope": {"openid system/*.read"}}), nil, 200)
	if idt := verify(t, body["id_token"].(string), id); idt.FHIRUser != ref || idt.Subject != id || idt.LoginID != access.LoginID {
		t.Fatalf("id token %+v", idt)
	}

	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {id}, "client_secret": {secret}, "scope": {"system/*.read"}}
	body = decoded(t, token(t, form, nil), nil, 200)
	if body["scope"] != "system/*.read" || body["id_token"] != nil {
		t.Fatalf("without openid: %v", body)
	}
	// One login serves all of a client's tokens.
	if verify(t, body["access_token"].(string), testBase).LoginID != access.LoginID {
		t.Fatal("a second token has another login")
	}

	expectTokenError(t, clientToken(t, id, "a guess", "", nil), 401, "invalid_client", "Invalid secret")
	expectTokenError(t, clientToken(t, uuid.NewString(), secret, "", nil), 401, "invalid_client", "Invalid client")
}

// The client's membership decides, as it is now, whatever was cached.
func TestClientCredentialsMembership(t *testing.T) {
	project := newProject(t, "Membership rules")
	t.Run("inactive", func(t *testing.T) {
		id, secret := newClient(t, project, nil)
		expectSecret(t, id, secret, true)
		setMembership(t, cachedClient(t, id).Membership, func(m map[string]any) { m["active"] = false })
		expectTokenError(t, clientToken(t, id, secret, "", nil), 400, "unauthorized_client", "Profile not active")
	})
	t.Run("removed", func(t *testing.T) {
		id, secret := newClient(t, project, nil)
		// An instance that hears no events, as if the deletion's had not come.
		here := New(live.svc.cfg, live.conns.NC, live.conns.JS, live.conns.Repo, live.conns.Sessions, quiet)
		call := func() error {
			_, err := here.basic(context.Background(), &bus.Request{Body: []byte(`{"id":"` + id + `","secret":"` + secret + `"}`)})
			return err
		}
		if err := call(); err != nil {
			t.Fatal(err)
		}
		c, ok := here.clients.Cached(id)
		if !ok {
			t.Fatal("the client is not cached")
		}
		if err := live.conns.Repo.Delete(context.Background(), repo.AllProjects, "ProjectMembership", c.Membership); err != nil {
			t.Fatal(err)
		}
		project1(t, "ProjectMembership", c.Membership, project)
		if fe := fhir.AsError(call()); fe.Status != 401 {
			t.Fatalf("%v, want 401", fe)
		}
		if _, ok := here.clients.Cached(id); ok {
			t.Fatal("the client is still cached")
		}
	})
	t.Run("a blocked address", func(t *testing.T) {
		policy := blockingPolicy(t, project, "10.88.0.0/16")
		id, secret := newClient(t, project, map[string]any{"accessPolicy": map[string]any{"reference": policy}})
		expectTokenError(t, clientToken(t, id, secret, "10.88.0.1", nil), 400, "unauthorized_client", fhir.AddressNotAllowed().Message())
		if resp := clientToken(t, id, secret, "10.89.0.1", nil); resp.Status != 200 {
			t.Fatalf("another address: %d %s", resp.Status, resp.Body)
		}
		_, err := live.svc.basic(context.Background(), &bus.Request{Body: []byte(`{"id":"` + id + `","secret":"` + secret + `"}`), Remote: "10.88.0.1"})
		if fe := fhir.AsError(err); err == nil || fe.Status != 403 {
			t.Fatalf("HTTP Basic from a blocked address: %v, want 403", err)
		}
	})
}

// A secret rotated on another instance works here at once, though this
// instance's cache still holds the client as it was.
func TestSecretRotatedElsewhere(t *testing.T) {
	ctx := context.Background()
	project := newProject(t, "Two instances")
	id, first := newClient(t, project, nil)
	// here hears no announcements: it is the instance they have not reached.
	here := New(live.svc.cfg, live.conns.NC, live.conns.JS, live.conns.Repo, live.conns.Sessions, quiet)
	call := func(secret string) error {
		_, err := here.basic(ctx, &bus.Request{Body: []byte(`{"id":"` + id + `","secret":"` + secret + `"}`)})
		return err
	}
	if err := call(first); err != nil {
		t.Fatal(err)
	}
	cur, err := live.svc.clients.Credentials(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	second, err := live.svc.clients.Rotate(ctx, id, cur)
	if err != nil {
		t.Fatal(err)
	}
	if stale, ok := here.clients.Cached(id); !ok || stale.Cred.Digest != cur.Digest {
		t.Fatal("the client is not cached as it was")
	}
	if err := call(second); err != nil {
		t.Fatalf("the new secret: %v", err)
	}
	if _, ok := here.clients.Cached(id); ok {
		t.Fatal("the stale client is still cached")
	}
	if err := call(first); err != nil {
		t.Fatalf("the retiring secret: %v", err)
	}
	// A rotation from the credentials it replaced, after another: refused.
	if _, err := live.svc.clients.Rotate(ctx, id, cur); fhir.AsError(err).Status != 409 {
		t.Fatalf("a rotation over another: %v, want 409", err)
	}
}

// HTTP Basic on the API answers with the client's login.
func TestBasic(t *testing.T) {
	project := newProject(t, "Basic")
	id, secret := newClient(t, project, nil)
	resp, err := live.svc.basic(context.Background(), &bus.Request{Body: []byte(`{"id":"` + id + `","secret":"` + secret + `"}`), Remote: "10.3.0.1"})
	body := decoded(t, resp, err, 200)
	c := cachedClient(t, id)
	if body["loginId"] != c.LoginID || c.LoginID == "" {
		t.Fatalf("answer %v, want login %s", body, c.LoginID)
	}
}

// private_key_jwt: an assertion signed with a key the client publishes
// stands in for its secret, once.
func TestClientAssertionGrant(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := jwksServer(t, 200, func() []byte {
		return keySetJSON(t, jose.JSONWebKey{Key: key.Public(), KeyID: "k1", Use: "sig", Algorithm: "ES256"})
	})
	project := newProject(t, "Assertions")
	id, _ := newClient(t, project, map[string]any{"jwksUri": jwks})
	noKeys, _ := newClient(t, project, nil)
	assertion := func(client, jti string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": client, "sub": client, "aud": testBase + "oauth2/token",
			"exp": time.Now().Add(time.Minute).Unix(), "jti": jti})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	grant := func(a string) *bus.Response {
		return token(t, url.Values{"grant_type": {"client_credentials"}, "client_assertion_type": {jwtBearerAssertion}, "client_assertion": {a}}, nil)
	}
	a := assertion(id, "j1")
	body := decoded(t, grant(a), nil, 200)
	if c := verify(t, body["access_token"].(string), testBase); c.ClientID != id || c.Profile != "ClientApplication/"+id {
		t.Fatalf("access token %+v", c)
	}
	expectTokenError(t, grant(a), 401, "invalid_client", "Client assertion already used")
	expectTokenError(t, grant(assertion(noKeys, "j2")), 401, "invalid_client", "Client must have a JWK Set URL")
	expectTokenError(t, grant(assertion(uuid.NewString(), "j3")), 401, "invalid_client", "Invalid client")
}
