package standalone

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

const formType = "application/x-www-form-urlencoded"

// A revoked token stops at the gateway on the very next request: the
// revocation's answer waits until the gateway's session view has it.
func TestRevocationOverHTTP(t *testing.T) {
	pid, su := adminProject(t, "revocation")
	r := do(t, "POST", "admin/projects/"+pid+"/client", su, "application/json", []byte(`{"name":"revoking client"}`))
	expect(t, r, 201)
	id, secret := r.json(t)["id"].(string), r.json(t)["secret"].(string)

	t.Run("an access token", func(t *testing.T) {
		tok, other := clientToken(t, id, secret), clientToken(t, id, secret)
		expect(t, do(t, "GET", "auth/me", tok, "", nil), 200)
		r := do(t, "POST", "oauth2/revoke", "", formType, []byte(url.Values{"token": {tok}}.Encode()), "Authorization", basic(id, secret))
		expect(t, r, 200)
		if r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("Cache-Control %q", r.header.Get("Cache-Control"))
		}
		expect(t, do(t, "GET", "fhir/R4/Patient", tok, "", nil), 401)
		expect(t, do(t, "GET", "fhir/R4/Patient", other, "", nil), 200)
	})
	t.Run("a refresh token ends its sign-in", func(t *testing.T) {
		member(t, su, pid, "resourceType", "Practitioner", "firstName", "Rev", "lastName", "Oked",
			"email", "revoked-signin@example.com", "password", "revoked sign-in password")
		tokens := signIn(t, "revoked-signin@example.com", "revoked sign-in password", pid, "openid offline_access")
		access, refresh := tokens["access_token"].(string), tokens["refresh_token"].(string)
		expect(t, do(t, "GET", "auth/me", access, "", nil), 200)
		expect(t, do(t, "POST", "oauth2/revoke", "", formType, []byte(url.Values{"token": {refresh}, "token_type_hint": {"refresh_token"}}.Encode())), 200)
		expect(t, do(t, "GET", "auth/me", access, "", nil), 401)
		r := do(t, "POST", "oauth2/token", "", formType, []byte(url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}.Encode()))
		expect(t, r, 400)
		if r.json(t)["error"] != "invalid_grant" {
			t.Fatalf("%s", r.body)
		}
	})
	t.Run("an unknown token", func(t *testing.T) {
		expect(t, do(t, "POST", "oauth2/revoke", "", formType, []byte(url.Values{"token": {"unknown"}, "client_id": {id}, "client_secret": {secret}}.Encode())), 200)
	})
	t.Run("a wrong secret", func(t *testing.T) {
		tok := clientToken(t, id, secret)
		r := do(t, "POST", "oauth2/revoke", "", formType, []byte(url.Values{"token": {tok}}.Encode()), "Authorization", basic(id, secret+"x"))
		expect(t, r, 401)
		if r.json(t)["error"] != "invalid_client" {
			t.Fatalf("%s", r.body)
		}
		expect(t, do(t, "GET", "auth/me", tok, "", nil), 200)
	})
	t.Run("introspection", func(t *testing.T) {
		tok := clientToken(t, id, secret)
		ask := func() map[string]any {
			r := do(t, "POST", "oauth2/introspect", "", formType, []byte(url.Values{"token": {tok}}.Encode()), "Authorization", basic(id, secret))
			expect(t, r, 200)
			return r.json(t)
		}
		if got := ask(); got["active"] != true || got["client_id"] != id {
			t.Fatalf("%v", got)
		}
		expect(t, do(t, "POST", "oauth2/revoke", "", formType, []byte(url.Values{"token": {tok}}.Encode()), "Authorization", basic(id, secret)), 200)
		if got := ask(); got["active"] != false {
			t.Fatalf("%v", got)
		}
	})
	t.Run("/auth/revoke", func(t *testing.T) {
		member(t, su, pid, "resourceType", "Practitioner", "firstName", "Two", "lastName", "Sessions",
			"email", "two-sessions@example.com", "password", "two sessions password")
		first := signIn(t, "two-sessions@example.com", "two sessions password", pid, "openid")["access_token"].(string)
		second := signIn(t, "two-sessions@example.com", "two sessions password", pid, "openid")["access_token"].(string)
		// One sign-in ends another of the same person's; someone else's is 404.
		r := do(t, "POST", "auth/revoke", second, "application/json", mustJSON(map[string]any{"loginId": loginOf(t, first)}))
		expect(t, r, 200)
		expect(t, do(t, "GET", "auth/me", first, "", nil), 401)
		expect(t, do(t, "GET", "auth/me", second, "", nil), 200)
		r = do(t, "POST", "auth/revoke", su, "application/json", mustJSON(map[string]any{"loginId": loginOf(t, second)}))
		expect(t, r, 404)
		expect(t, do(t, "GET", "auth/me", second, "", nil), 200)
	})
}

// loginOf reads a token's login_id (its signature is the server's business).
func loginOf(t *testing.T, tok string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", tok)
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	var c struct {
		LoginID string `json:"login_id"`
	}
	if err != nil || json.Unmarshal(raw, &c) != nil || c.LoginID == "" {
		t.Fatalf("claims %s: %v", raw, err)
	}
	return c.LoginID
}
