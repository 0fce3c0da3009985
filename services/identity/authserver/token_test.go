package authserver

import (
	"context"
	"encoding/base64"
	"net/url"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
	"github.com/pinion-health/pinion/services/identity/limits"
)

// unwired is the service without NATS, sessions or a database: what it
// answers, it answers before looking anything up (a lookup would panic).
func unwired(t *testing.T) *Service {
	t.Helper()
	key, err := auth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s := New(Config{BaseURL: testBase}, nil, nil, nil, nil, limits.NewSignIns(), nil, nil, testkit.Quiet)
	s.signer = &auth.Signer{Key: key, Issuer: testBase}
	return s
}

func TestRefusalResponse(t *testing.T) {
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
			testkit.TokenError(t, (&Refusal{code: tc.code, text: tc.text}).Response(), tc.status, tc.code, tc.text)
			if got := (&Refusal{code: tc.code, text: tc.text}).Error(); got != tc.code+": "+tc.text {
				t.Fatalf("error text %q", got)
			}
		})
	}
}

func basic(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }

// credentials is the one reader of a client's credentials, for every
// endpoint: Basic (form-encoded halves) or the form; both only when they
// agree (Medplum's client may send both), never one silently preferred.
func TestCredentials(t *testing.T) {
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
		{name: "form, a public client", form: form("client_id", "app"), id: "app"},
		{name: "nothing", form: form()},
		{name: "basic", header: basic("app:s3cret"), form: form(), id: "app", secret: "s3cret"},
		{name: "basic, form-encoded halves", header: basic("my%3Aapp:a%2Bb%20c"), id: "my:app", secret: "a+b c"},
		{name: "basic, a plus is a space", header: basic("app:a+b"), id: "app", secret: "a b"},
		{name: "basic, a colon in the secret", header: basic("app:s:e:c"), id: "app", secret: "s:e:c"},
		{name: "both, agreeing (Medplum's client)", header: basic("app:s3cret"),
			form: form("client_id", "app", "client_secret", "s3cret"), id: "app", secret: "s3cret"},
		{name: "both, the form naming the client only", header: basic("app:s3cret"), form: form("client_id", "app"), id: "app", secret: "s3cret"},
		{name: "both, another client", header: basic("app:s3cret"),
			form: form("client_id", "other", "client_secret", "s3cret"), code: "invalid_client", text: "Invalid client"},
		{name: "both, another secret", header: basic("app:s3cret"),
			form: form("client_id", "app", "client_secret", "other-secret"), code: "invalid_request", text: "Client credentials sent twice"},
		{name: "the form is not read to fill a half the header lacks", header: basic("app:"),
			form: form("client_secret", "s3cret"), code: "invalid_request", text: "Client credentials sent twice"},
		{name: "a secret alone names no client", form: form("client_secret", "s3cret"), code: "invalid_request", text: "Missing client_id"},
		{name: "bearer header", header: "Bearer abc", form: form("client_id", "app", "client_secret", "s3cret"),
			code: "invalid_request", text: "Invalid authorization header"},
		{name: "lower-case scheme", header: "basic " + base64.StdEncoding.EncodeToString([]byte("app:s3cret")),
			code: "invalid_request", text: "Invalid authorization header"},
		{name: "scheme alone", header: "Basic", code: "invalid_request", text: "Invalid authorization header"},
		{name: "not base64", header: "Basic !!!", code: "invalid_request", text: "Invalid authorization header"},
		{name: "unpadded base64", header: "Basic " + base64.RawStdEncoding.EncodeToString([]byte("app:s3cret")),
			code: "invalid_request", text: "Invalid authorization header"},
		{name: "basic without a colon", header: basic("app"), id: "app"},
		{name: "basic without an id", header: basic(":s3cret"), code: "invalid_request", text: "Invalid authorization header"},
		{name: "basic, empty credentials", header: "Basic ", code: "invalid_request", text: "Invalid authorization header"},
		{name: "basic, a bad escape in the id reads as none", header: basic("a%zz:s3cret"),
			code: "invalid_request", text: "Invalid authorization header"},
		{name: "basic, a bad escape in the secret reads as none", header: basic("app:%"), id: "app"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, secret, no := credentials(tc.header, tc.form)
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
		{"assertion type without an assertion", form, v("grant_type", "client_credentials", "client_assertion_type", JWTBearerAssertion), nil, 401, "invalid_client", "Invalid client assertion"},
		{"assertion not a JWT", form, v("grant_type", "client_credentials", "client_assertion_type", JWTBearerAssertion, "client_assertion", "x.y.z"), nil, 401, "invalid_client", "Invalid client assertion"},
		{"assertion about another subject", form, v("grant_type", "client_credentials", "client_assertion_type", JWTBearerAssertion,
			"client_assertion", unsigned(jwt.MapClaims{"iss": "app", "sub": "someone"})), nil, 401, "invalid_client", "Invalid client assertion issuer"},
		{"assertion without an issuer", form, v("grant_type", "client_credentials", "client_assertion_type", JWTBearerAssertion,
			"client_assertion", unsigned(jwt.MapClaims{"sub": "app"})), nil, 401, "invalid_client", "Invalid client assertion issuer"},
		{"an assertion beats a secret", form, v("grant_type", "client_credentials", "client_id", "app", "client_secret", "s3cret",
			"client_assertion_type", JWTBearerAssertion, "client_assertion", "x"), nil, 401, "invalid_client", "Invalid client assertion"},
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
			resp, err := s.Token(context.Background(), &bus.Request{Method: "POST", Header: h, Body: []byte(tc.body)})
			if err != nil {
				t.Fatal(err)
			}
			testkit.TokenError(t, resp, tc.status, tc.code, tc.text)
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
			_, err := s.Basic(context.Background(), &bus.Request{Body: []byte(body), Remote: "10.0.0.1"})
			if fe := fhir.AsError(err); fe.Status != 401 || fe.Message() != "Unauthorized" {
				t.Fatalf("%v, want 401 Unauthorized", err)
			}
		})
	}
	if n := s.limiter.Keys(); n != 0 {
		t.Fatalf("%d failures counted for requests that named no client", n)
	}
}

// A grant refuses with an error; the token endpoint alone turns it into
// the OAuth answer (with the revocation's session revision when the
// refusal wrote one), and a request it refuses before any lookup needs
// nothing wired.
func TestTokenEndpointAnswersRefusals(t *testing.T) {
	s := unwired(t)
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
		resp, err := s.Token(context.Background(), r)
		if err != nil {
			t.Fatalf("%s: a refusal came back as an error: %v", tc.body, err)
		}
		testkit.TokenError(t, resp, 400, tc.code, tc.text)
		if _, _, ok := resp.Session(); ok {
			t.Errorf("%s: a refusal that wrote nothing waits for a session revision", tc.body)
		}
	}
	resp := InvalidGrant("Token revoked").Revoked(42).Response()
	if bucket, rev, ok := resp.Session(); !ok || rev != 42 || bucket != "pinion_logins" {
		t.Fatalf("a revoking refusal's answer waits for %q %d %v, want pinion_logins 42", bucket, rev, ok)
	}
}
