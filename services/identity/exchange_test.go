package identity

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/pinion-health/pinion/pkg/bus"
)

// RFC 8693's grant and the subject token type Medplum exchanges.
const (
	grantTokenExchange   = "urn:ietf:params:oauth:grant-type:token-exchange"
	tokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"
)

func TestTokenExchange(t *testing.T) {
	p := newOIDCProvider(t)
	project := newProject(t, "Exchange clinic")
	client := strings.TrimPrefix(newResource(t, project, map[string]any{"resourceType": "ClientApplication", "name": "mobile app",
		"identityProvider": p.idp(nil)}), "ClientApplication/")
	email := newEmail("dan")
	user := "User/" + newUser(t, email, "", "")
	profile := newPractitioner(t, project, "Dan", "Ext")
	newMembership(t, project, user, profile, nil)
	exchange := func(form url.Values) map[string]any {
		t.Helper()
		form.Set("grant_type", grantTokenExchange)
		resp := token(t, form, nil)
		return decoded(t, resp, nil, resp.Status)
	}
	form := func(tok string) url.Values {
		return url.Values{"client_id": {client}, "subject_token": {tok}, "subject_token_type": {tokenTypeAccessToken}}
	}

	// The provider vouches for its token: its user info names Dan.
	out := exchange(form(p.accessToken(map[string]any{"sub": "x", "email": strings.ToUpper(email)})))
	at, _ := out["access_token"].(string)
	if at == "" || out["refresh_token"] == nil {
		t.Fatalf("exchange answered %v", out)
	}
	if c := verify(t, at, testBase); c.Profile != profile || c.ClientID != client {
		t.Fatalf("token for %q (client %q), want %s", c.Profile, c.ClientID, profile)
	}

	// Medplum's /auth/exchange alias.
	resp, err := live.svc.federation.Exchange(context.Background(), jsonRequest("10.9.0.2",
		map[string]any{"clientId": client, "externalAccessToken": p.accessToken(map[string]any{"email": email})}))
	if out := decoded(t, resp, err, 200); out["access_token"] == nil {
		t.Fatalf("/auth/exchange answered %v", out)
	}
	resp, err = live.svc.federation.Exchange(context.Background(), jsonRequest("10.9.0.2", map[string]any{"clientId": client}))
	extRefused(t, resp, err, "Missing externalAccessToken")

	// Refusals, as RFC 6749 errors with Medplum's texts.
	for _, tc := range []struct {
		name string
		form url.Values
		text string
	}{
		{"a token the provider does not know", form("at-forged"), "Failed to verify code"},
		{"nobody with the address", form(p.accessToken(map[string]any{"email": newEmail("nobody")})), "User not found"},
		{"an unverified address", form(p.accessToken(map[string]any{"email": email, "email_verified": false})), "not verified"},
		{"another token type", url.Values{"client_id": {client}, "subject_token": {"x"}, "subject_token_type": {"urn:ietf:params:oauth:token-type:id_token"}}, "Invalid subject_token_type"},
		{"no client", url.Values{"subject_token": {"x"}, "subject_token_type": {tokenTypeAccessToken}}, "Invalid client"},
		{"a client without a provider", url.Values{"client_id": {strings.TrimPrefix(newResource(t, project, map[string]any{"resourceType": "ClientApplication", "name": "plain"}), "ClientApplication/")}, "subject_token": {"x"}, "subject_token_type": {tokenTypeAccessToken}}, "Invalid client"},
		{"another membership", func() url.Values {
			f := form(p.accessToken(map[string]any{"email": email}))
			f.Set("membership_id", "00000000-0000-0000-0000-000000000001")
			return f
		}(), "Membership not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := exchange(tc.form)
			if out["error"] != "invalid_request" || !strings.Contains(out["error_description"].(string), tc.text) {
				t.Fatalf("answered %v, want invalid_request %q", out, tc.text)
			}
		})
	}
}

// The token exchange is a grant of its own, which discovery names after
// the authorization server's.
func TestDiscoveryNamesTheTokenExchange(t *testing.T) {
	resp, err := live.svc.oauth.Discovery(context.Background(), &bus.Request{Method: "GET", Path: "/.well-known/openid-configuration"})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Grants []string `json:"grant_types_supported"`
	}
	if err := json.Unmarshal(resp.Body, &doc); err != nil {
		t.Fatal(err)
	}
	want := []string{"client_credentials", "authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:token-exchange"}
	if !slices.Equal(doc.Grants, want) {
		t.Fatalf("grant_types_supported %v, want %v", doc.Grants, want)
	}
}
