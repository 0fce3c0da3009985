package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
)

// The token endpoint takes an assertion whose audience is the issuer, as
// oauth4webapi writes it, and refuses a client whose key set is on a
// private address when private addresses are not allowed.
func TestClientAssertionAudienceAndAddress(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwks, _ := testkit.JWKSServer(t, 200, func() []byte {
		return testkit.KeySetJSON(t, jose.JSONWebKey{Key: key.Public(), KeyID: "k1", Use: "sig", Algorithm: "ES256"})
	})
	project := newProject(t, "Issuer audience")
	id, _ := newClient(t, project, map[string]any{"jwksUri": jwks})
	assertion := func(aud, jti string) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": id, "sub": id, "aud": aud,
			"exp": time.Now().Add(time.Minute).Unix(), "jti": jti})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	form := func(a string) url.Values {
		return url.Values{"grant_type": {"client_credentials"}, "client_assertion_type": {authserver.JWTBearerAssertion}, "client_assertion": {a}}
	}
	for i, aud := range []string{testBase, strings.TrimSuffix(testBase, "/")} {
		body := decoded(t, token(t, form(assertion(aud, "iss"+string(rune('a'+i)))), nil), nil, 200)
		if c := verify(t, body["access_token"].(string), testBase); c.ClientID != id {
			t.Fatalf("aud %s: access token %+v", aud, c)
		}
	}
	testkit.TokenError(t, token(t, form(assertion(testBase+"oauth2/authorize", "other")), nil), 401, "invalid_client", "Invalid client assertion audience")

	strict := New(Config{BaseURL: testBase}, nil, nil, live.conns.Repo, nil, quiet)
	resp, err := strict.oauth.Token(context.Background(), formRequest(form(assertion(testBase, "strict")), nil))
	if err != nil {
		t.Fatal(err)
	}
	testkit.TokenError(t, resp, 401, "invalid_client", "Could not read the client's JWK Set")
}
