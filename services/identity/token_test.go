package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
	"github.com/pinion-health/pinion/services/identity/limits"
)

// HTTP Basic counts refused clients against the sign-in limiter, per
// client and address, and says only 401.
func TestBasicCountsFailures(t *testing.T) {
	s := live.svc
	body := []byte(`{"id":"` + uuid.NewString() + `","secret":"guess"}`)
	call := func(remote string) error {
		_, err := s.oauth.Basic(context.Background(), &bus.Request{Body: body, Remote: remote})
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

	testkit.TokenError(t, clientToken(t, id, "a guess", "", nil), 401, "invalid_client", "Invalid secret")
	testkit.TokenError(t, clientToken(t, uuid.NewString(), secret, "", nil), 401, "invalid_client", "Invalid client")
}

// The client's membership decides, as it is now, whatever was cached.
func TestClientCredentialsMembership(t *testing.T) {
	project := newProject(t, "Membership rules")
	t.Run("inactive", func(t *testing.T) {
		id, secret := newClient(t, project, nil)
		expectSecret(t, id, secret, true)
		setMembership(t, cachedClient(t, id).Membership, func(m map[string]any) { m["active"] = false })
		testkit.TokenError(t, clientToken(t, id, secret, "", nil), 400, "unauthorized_client", "Profile not active")
	})
	t.Run("removed", func(t *testing.T) {
		id, secret := newClient(t, project, nil)
		// An instance that hears no events, as if the deletion's had not come.
		here := New(live.svc.cfg, live.conns.NC, live.conns.JS, live.conns.Repo, live.conns.Sessions, quiet)
		call := func() error {
			_, err := here.oauth.Basic(context.Background(), &bus.Request{Body: []byte(`{"id":"` + id + `","secret":"` + secret + `"}`)})
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
		testkit.TokenError(t, clientToken(t, id, secret, "10.88.0.1", nil), 400, "unauthorized_client", fhir.AddressNotAllowed().Message())
		if resp := clientToken(t, id, secret, "10.89.0.1", nil); resp.Status != 200 {
			t.Fatalf("another address: %d %s", resp.Status, resp.Body)
		}
		_, err := live.svc.oauth.Basic(context.Background(), &bus.Request{Body: []byte(`{"id":"` + id + `","secret":"` + secret + `"}`), Remote: "10.88.0.1"})
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
		_, err := here.oauth.Basic(ctx, &bus.Request{Body: []byte(`{"id":"` + id + `","secret":"` + secret + `"}`)})
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
	resp, err := live.svc.oauth.Basic(context.Background(), &bus.Request{Body: []byte(`{"id":"` + id + `","secret":"` + secret + `"}`), Remote: "10.3.0.1"})
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
	jwks, _ := testkit.JWKSServer(t, 200, func() []byte {
		return testkit.KeySetJSON(t, jose.JSONWebKey{Key: key.Public(), KeyID: "k1", Use: "sig", Algorithm: "ES256"})
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
		return token(t, url.Values{"grant_type": {"client_credentials"}, "client_assertion_type": {authserver.JWTBearerAssertion}, "client_assertion": {a}}, nil)
	}
	a := assertion(id, "j1")
	body := decoded(t, grant(a), nil, 200)
	if c := verify(t, body["access_token"].(string), testBase); c.ClientID != id || c.Profile != "ClientApplication/"+id {
		t.Fatalf("access token %+v", c)
	}
	testkit.TokenError(t, grant(a), 401, "invalid_client", "Client assertion already used")
	testkit.TokenError(t, grant(assertion(noKeys, "j2")), 401, "invalid_client", "Client must have a JWK Set URL")
	testkit.TokenError(t, grant(assertion(uuid.NewString(), "j3")), 401, "invalid_client", "Invalid client")
}
