package authserver

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

func TestAssertionIssuer(t *testing.T) {
	hs := func(c jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte("k"))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	cases := []struct {
		name, typ, assertion string
		id                   string
		text                 string
	}{
		{"issuer is subject", JWTBearerAssertion, hs(jwt.MapClaims{"iss": "app", "sub": "app"}), "app", ""},
		{"unverified: any signature reads", JWTBearerAssertion, hs(jwt.MapClaims{"iss": "app", "sub": "app", "exp": 1}), "app", ""},
		{"no type", "", hs(jwt.MapClaims{"iss": "app", "sub": "app"}), "", "Unsupported client assertion type"},
		{"another type", "urn:ietf:params:oauth:client-assertion-type:saml2-bearer", hs(jwt.MapClaims{"iss": "app", "sub": "app"}), "", "Unsupported client assertion type"},
		{"the type's case counts", strings.ToUpper(JWTBearerAssertion), hs(jwt.MapClaims{"iss": "app", "sub": "app"}), "", "Unsupported client assertion type"},
		{"empty", JWTBearerAssertion, "", "", "Invalid client assertion"},
		{"not a JWT", JWTBearerAssertion, "not.a.jwt", "", "Invalid client assertion"},
		{"two parts", JWTBearerAssertion, "eyJhbGciOiJSUzI1NiJ9.e30", "", "Invalid client assertion"},
		{"subject differs", JWTBearerAssertion, hs(jwt.MapClaims{"iss": "app", "sub": "someone"}), "", "Invalid client assertion issuer"},
		{"no subject", JWTBearerAssertion, hs(jwt.MapClaims{"iss": "app"}), "", "Invalid client assertion issuer"},
		{"no issuer", JWTBearerAssertion, hs(jwt.MapClaims{"sub": "app"}), "", "Invalid client assertion issuer"},
		{"neither", JWTBearerAssertion, hs(jwt.MapClaims{}), "", "Invalid client assertion issuer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, no := assertionIssuer(tc.typ, tc.assertion)
			code := ""
			if tc.text != "" {
				code = "invalid_client"
			}
			expectRefusal(t, no, code, tc.text)
			if id != tc.id {
				t.Fatalf("id %q, want %q", id, tc.id)
			}
		})
	}
}

// testKeys are a client's keys: the ones it publishes, and another.
type testKeys struct {
	rsa, otherRSA *rsa.PrivateKey
	ec            *ecdsa.PrivateKey
}

func newTestKeys(t *testing.T) testKeys {
	t.Helper()
	var k testKeys
	var err error
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if k.otherRSA, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		t.Fatal(err)
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		t.Fatal(err)
	}
	return k
}

func TestCheckAssertion(t *testing.T) {
	k := newTestKeys(t)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	const id, tokenURL = "app", testBase + "oauth2/token"
	published := func(*jwt.Token) (any, error) {
		return jwt.VerificationKeySet{Keys: []jwt.VerificationKey{k.rsa.Public(), k.ec.Public()}}, nil
	}
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := jwt.MapClaims{"iss": id, "sub": id, "aud": tokenURL, "exp": now.Add(4 * time.Minute).Unix(), "jti": "a1"}
		if edit != nil {
			edit(c)
		}
		return c
	}
	sign := func(m jwt.SigningMethod, key crypto.PrivateKey, c jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	rs := func(edit func(jwt.MapClaims)) string { return sign(jwt.SigningMethodRS384, k.rsa, claims(edit)) }
	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) func(jwt.MapClaims) {
		return func(c jwt.MapClaims) { c["exp"] = now.Add(d).Unix() }
	}
	cases := []struct {
		name      string
		assertion string
		keys      jwt.Keyfunc
		text      string
	}{
		{name: "RS256", assertion: sign(jwt.SigningMethodRS256, k.rsa, claims(nil))},
		{name: "RS384", assertion: rs(nil)},
		{name: "RS512", assertion: sign(jwt.SigningMethodRS512, k.rsa, claims(nil))},
		{name: "PS256", assertion: sign(jwt.SigningMethodPS256, k.rsa, claims(nil))},
		{name: "ES256", assertion: sign(jwt.SigningMethodES256, k.ec, claims(nil))},
		// RFC 7523 §3: the issuer identifies the server as well; oauth4webapi sends it.
		{name: "audience the issuer", assertion: rs(func(c jwt.MapClaims) { c["aud"] = testBase })},
		{name: "audience the issuer without its slash", assertion: rs(func(c jwt.MapClaims) { c["aud"] = strings.TrimSuffix(testBase, "/") })},
		{name: "audience among several", assertion: rs(func(c jwt.MapClaims) { c["aud"] = []string{"https://elsewhere.example/", tokenURL} })},
		{name: "expires at the longest life", assertion: rs(at(maxAssertionLife + assertionLeeway))},
		{name: "expired within the leeway", assertion: rs(at(-assertionLeeway + time.Second))},
		{name: "issued in the past", assertion: rs(func(c jwt.MapClaims) { c["iat"] = now.Add(-time.Minute).Unix() })},

		{name: "another key", assertion: sign(jwt.SigningMethodRS384, k.otherRSA, claims(nil)), text: "Invalid client assertion signature"},
		{name: "HMAC", assertion: sign(jwt.SigningMethodHS256, []byte("secret"), claims(nil)), text: "Invalid client assertion signature"},
		{name: "no signature", assertion: none, text: "Invalid client assertion signature"},
		{name: "ES256 claimed, RSA key", assertion: strings.Replace(rs(nil), "eyJhbGciOiJSUzM4NCI", "eyJhbGciOiJFUzI1NiI", 1), text: "Invalid client assertion signature"},
		{name: "tampered claims", assertion: func() string {
			p := strings.Split(rs(nil), ".")
			p[1] = strings.Split(rs(func(c jwt.MapClaims) { c["jti"] = "a2" }), ".")[1]
			return strings.Join(p, ".")
		}(), text: "Invalid client assertion signature"},
		{name: "wrong audience", assertion: rs(func(c jwt.MapClaims) { c["aud"] = "https://elsewhere.example/token" }), text: "Invalid client assertion audience"},
		{name: "audience another path of the server", assertion: rs(func(c jwt.MapClaims) { c["aud"] = testBase + "oauth2/authorize" }), text: "Invalid client assertion audience"},
		// A missing audience is a missing claim, not a wrong one.
		{name: "no audience", assertion: rs(func(c jwt.MapClaims) { delete(c, "aud") }), text: "Invalid client assertion signature"},
		{name: "wrong audience and expired: the audience is named", assertion: rs(func(c jwt.MapClaims) {
			c["aud"], c["exp"] = "https://elsewhere.example/token", now.Add(-time.Hour).Unix()
		}), text: "Invalid client assertion audience"},
		{name: "expired", assertion: rs(at(-time.Hour)), text: "Invalid client assertion signature"},
		{name: "expired past the leeway", assertion: rs(at(-assertionLeeway - time.Second)), text: "Invalid client assertion signature"},
		{name: "no expiry", assertion: rs(func(c jwt.MapClaims) { delete(c, "exp") }), text: "Invalid client assertion signature"},
		{name: "not yet valid", assertion: rs(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Hour).Unix() }), text: "Invalid client assertion signature"},
		{name: "another issuer", assertion: rs(func(c jwt.MapClaims) { c["iss"] = "other" }), text: "Invalid client assertion signature"},
		{name: "another subject", assertion: rs(func(c jwt.MapClaims) { c["sub"] = "other" }), text: "Invalid client assertion signature"},
		{name: "lives too long", assertion: rs(at(maxAssertionLife + assertionLeeway + time.Second)), text: "Client assertion must expire within 5 minutes"},
		{name: "lives an hour", assertion: rs(at(time.Hour)), text: "Client assertion must expire within 5 minutes"},
		{name: "no jti", assertion: rs(func(c jwt.MapClaims) { delete(c, "jti") }), text: "Client assertion has no jti"},
		{name: "empty jti", assertion: rs(func(c jwt.MapClaims) { c["jti"] = "" }), text: "Client assertion has no jti"},
		{name: "key set unreadable", assertion: rs(nil), keys: func(*jwt.Token) (any, error) {
			return nil, fmt.Errorf("%w: answered 500", errNoKeySet)
		}, text: "Could not read the client's JWK Set"},
		{name: "no such key in the set", assertion: rs(nil), keys: func(*jwt.Token) (any, error) {
			return nil, errors.New(`no key "k9"`)
		}, text: "Invalid client assertion signature"},
		{name: "empty key set", assertion: rs(nil), keys: func(*jwt.Token) (any, error) {
			return jwt.VerificationKeySet{}, nil
		}, text: "Invalid client assertion signature"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			keys := tc.keys
			if keys == nil {
				keys = published
			}
			claims, no := checkAssertion(tc.assertion, id, assertionAudiences(testBase), keys, now)
			if tc.text == "" {
				expectRefusal(t, no, "", "")
				if claims == nil || claims.ID == "" || claims.ExpiresAt == nil {
					t.Fatalf("claims %+v", claims)
				}
				return
			}
			expectRefusal(t, no, "invalid_client", tc.text)
			if claims != nil {
				t.Fatalf("claims of a refused assertion: %+v", claims)
			}
		})
	}
}

// An assertion is good for one token until it expires; ids are per client.
func TestAssertionUsedOnce(t *testing.T) {
	a := newAssertions(true)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	exp := now.Add(4 * time.Minute)
	steps := []struct {
		name string
		key  string
		exp  time.Time
		at   time.Time
		want bool
	}{
		{"first use", "app|a1", exp, now, true},
		{"replayed at once", "app|a1", exp, now, false},
		{"replayed at its expiry", "app|a1", exp, exp, false},
		{"replayed within the leeway after", "app|a1", exp, exp.Add(assertionLeeway - time.Second), false},
		{"another client's id alike", "other|a1", exp, now, true},
		{"another id", "app|a2", exp, now, true},
		// Once the assertion could no longer pass its expiry check, its id
		// may be forgotten; a new assertion with it is then new.
		{"past expiry and leeway", "app|a1", exp.Add(time.Hour), exp.Add(assertionLeeway), true},
		{"and now spent until its new expiry", "app|a1", exp.Add(time.Hour), exp.Add(time.Minute), false},
	}
	for _, s := range steps {
		if got := a.first(s.key, s.exp, s.at); got != s.want {
			t.Fatalf("%s: first = %v, want %v", s.name, got, s.want)
		}
	}
}

func TestLoadKeySet(t *testing.T) {
	k := newTestKeys(t)
	good := testkit.KeySetJSON(t,
		jose.JSONWebKey{Key: k.rsa.Public(), KeyID: "sig", Use: "sig", Algorithm: "RS384"},
		jose.JSONWebKey{Key: k.ec.Public(), KeyID: "any"},
		jose.JSONWebKey{Key: k.otherRSA.Public(), KeyID: "enc", Use: "enc"},
		// A private key published by mistake serves as its public half.
		jose.JSONWebKey{Key: k.otherRSA, KeyID: "private", Use: "sig"},
	)
	ctx := context.Background()
	t.Run("keys for signatures only, public halves", func(t *testing.T) {
		uri, _ := testkit.JWKSServer(t, 200, func() []byte { return good })
		set, err := newAssertions(true).load(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		var kids []string
		for _, key := range set.keys {
			kids = append(kids, key.KeyID)
			if !key.IsPublic() {
				t.Fatalf("key %s is kept private", key.KeyID)
			}
		}
		if strings.Join(kids, ",") != "sig,any,private" {
			t.Fatalf("kept %v", kids)
		}
	})
	for name, c := range map[string]struct {
		uri    string
		status int
		body   []byte
	}{
		"not http":       {uri: "ftp://127.0.0.1/jwks.json"},
		"a file":         {uri: "file:///etc/passwd"},
		"no host":        {uri: "https:///jwks.json"},
		"not a URL":      {uri: "://"},
		"relative":       {uri: "/jwks.json"},
		"an error":       {status: 500, body: good},
		"a redirect":     {status: 302, body: nil},
		"not JSON":       {status: 200, body: []byte("<html>")},
		"over the bound": {status: 200, body: append(append([]byte(`{"keys":[],"x":"`), strings.Repeat("x", maxJWKSSize)...), `"}`...)},
	} {
		t.Run(name, func(t *testing.T) {
			uri := c.uri
			var hits *atomic.Int32
			if uri == "" {
				uri, hits = testkit.JWKSServer(t, c.status, func() []byte { return c.body })
			}
			_, err := newAssertions(true).load(ctx, uri)
			if !errors.Is(err, errNoKeySet) {
				t.Fatalf("%v, want errNoKeySet", err)
			}
			if hits != nil && hits.Load() != 1 {
				t.Fatalf("%d fetches", hits.Load())
			}
		})
	}
}

// keys fetches a client's set once, again after jwksTTL, and again for an
// unknown kid no more often than every jwksRefetch.
func TestAssertionKeys(t *testing.T) {
	k := newTestKeys(t)
	published := []jose.JSONWebKey{{Key: k.rsa.Public(), KeyID: "k1", Use: "sig"}}
	uri, hits := testkit.JWKSServer(t, 200, func() []byte { return testkit.KeySetJSON(t, published...) })
	a := newAssertions(true)
	ctx := context.Background()
	age := func(d time.Duration) {
		set, _ := a.sets.Get(uri)
		set.fetched = time.Now().Add(-d)
	}
	steps := []struct {
		name    string
		before  func()
		kid     string
		keys    int
		err     bool
		fetches int32
	}{
		{name: "first use fetches", kid: "k1", keys: 1, fetches: 1},
		{name: "cached", kid: "k1", keys: 1, fetches: 1},
		{name: "no kid: every key", kid: "", keys: 1, fetches: 1},
		{name: "an unknown kid just after a fetch is not fetched for", kid: "k2", err: true, fetches: 1},
		{name: "an unknown kid later fetches again", before: func() {
			published = append(published, jose.JSONWebKey{Key: k.ec.Public(), KeyID: "k2", Use: "sig"})
			age(jwksRefetch + time.Second)
		}, kid: "k2", keys: 1, fetches: 2},
		{name: "no kid: every key now", kid: "", keys: 2, fetches: 2},
		{name: "a known kid within the TTL is not fetched for", before: func() { age(jwksTTL - time.Second) }, kid: "k1", keys: 1, fetches: 2},
		{name: "past the TTL the set is fetched again", before: func() {
			published = published[1:]
			age(jwksTTL + time.Second)
		}, kid: "k1", err: true, fetches: 3},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		set, err := a.keys(ctx, uri, s.kid)
		switch {
		case s.err && err == nil, !s.err && err != nil:
			t.Fatalf("%s: err %v", s.name, err)
		case s.err && errors.Is(err, errNoKeySet):
			t.Fatalf("%s: a missing key reads as an unreadable set: %v", s.name, err)
		case len(set.Keys) != s.keys:
			t.Fatalf("%s: %d keys, want %d", s.name, len(set.Keys), s.keys)
		case hits.Load() != s.fetches:
			t.Fatalf("%s: %d fetches, want %d", s.name, hits.Load(), s.fetches)
		}
	}
}
