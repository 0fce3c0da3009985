package identity

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
)

// A relying party that knows only the published key set and RS256 (as
// go-oidc and openid-client do without discovery) verifies the ID tokens
// of people's sign-ins; access and refresh tokens stay ES256, and so does
// a client's own ID token (no person signed in: see clientCredentials).
func TestIDTokensAreRS256(t *testing.T) {
	resp, err := live.svc.oauth.JWKS(context.Background(), &bus.Request{})
	if err != nil {
		t.Fatal(err)
	}
	var set struct{ Keys []auth.JWK }
	if err := json.Unmarshal(resp.Body, &set); err != nil {
		t.Fatal(err)
	}
	relyingParty := func(t *testing.T, tok, audience string) *auth.Claims {
		t.Helper()
		c := &auth.Claims{}
		_, err := jwt.ParseWithClaims(tok, c, func(tk *jwt.Token) (any, error) {
			for _, k := range set.Keys {
				if k.Kid == tk.Header["kid"] && k.Kty == "RSA" {
					return k.RSAPublicKey()
				}
			}
			return nil, jwt.ErrTokenUnverifiable
		}, jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(testBase), jwt.WithAudience(audience), jwt.WithExpirationRequired())
		if err != nil {
			t.Fatalf("the relying party refused the ID token: %v", err)
		}
		return c
	}
	alg := func(tok string) string {
		tk, _, err := jwt.NewParser().ParseUnverified(tok, &auth.Claims{})
		if err != nil {
			t.Fatal(err)
		}
		return tk.Method.Alg()
	}

	project := newProject(t, "RS256")
	id, secret := newClient(t, project, nil)
	body := decoded(t, clientToken(t, id, secret, "", url.Values{"scope": {"openid"}}), nil, 200)
	for _, k := range []string{"access_token", "id_token"} {
		if a := alg(body[k].(string)); a != "ES256" {
			t.Errorf("client %s signed %s", k, a)
		}
	}

	p := newPerson(t, "rs256")
	body = decoded(t, redeem(t, p.code(t, nil)), nil, 200)
	if c := relyingParty(t, body["id_token"].(string), testBase); c.FHIRUser == "" {
		t.Errorf("user ID token %+v", c)
	}
	// An id_token_hint verifies, and an access token is not one.
	if c, err := live.svc.oauth.IDTokenVerifier().Verify(body["id_token"].(string)); err != nil || c.FHIRUser == "" {
		t.Errorf("id token hint: %v", err)
	}
	for _, k := range []string{"access_token", "refresh_token"} {
		if tok, _ := body[k].(string); tok != "" && alg(tok) != "ES256" {
			t.Errorf("%s signed %s", k, alg(tok))
		}
	}
}
