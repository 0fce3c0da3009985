package identity

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
)

func TestDiscovery(t *testing.T) {
	s := unwired(t)
	doc := func(path string) map[string]any {
		t.Helper()
		resp, err := s.discovery(context.Background(), &bus.Request{Method: "GET", Path: path})
		if err != nil || resp.Status != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		var m map[string]any
		if err := json.Unmarshal(resp.Body, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	oidc := doc("/.well-known/openid-configuration")
	for k, want := range map[string]any{
		"issuer":                 testBase,
		"authorization_endpoint": testBase + "oauth2/authorize",
		"token_endpoint":         testBase + "oauth2/token",
		"userinfo_endpoint":      testBase + "oauth2/userinfo",
		"jwks_uri":               testBase + ".well-known/jwks.json",
		"end_session_endpoint":   testBase + "oauth2/logout",
		"grant_types_supported":  []any{"client_credentials", "authorization_code", "refresh_token"},
		// What the token endpoint accepts, no more: see the grant and
		// assertion tests.
		"response_types_supported":                         []any{"code"},
		"code_challenge_methods_supported":                 []any{"S256", "plain"},
		"token_endpoint_auth_methods_supported":            []any{"client_secret_basic", "client_secret_post", "private_key_jwt"},
		"token_endpoint_auth_signing_alg_values_supported": []any{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"},
		"id_token_signing_alg_values_supported":            []any{"ES256"},
	} {
		if !reflect.DeepEqual(oidc[k], want) {
			t.Errorf("%s = %v, want %v", k, oidc[k], want)
		}
	}
	if _, ok := oidc["capabilities"]; ok {
		t.Error("OpenID discovery carries SMART's capabilities")
	}
	smart := doc("/.well-known/smart-configuration")
	if smart["revocation_endpoint"] != testBase+"oauth2/logout" || smart["token_endpoint"] != oidc["token_endpoint"] {
		t.Errorf("SMART configuration: %v", smart)
	}
	caps, _ := smart["capabilities"].([]any)
	if len(caps) != 7 || caps[0] != "client-confidential-symmetric" || caps[1] != "client-confidential-asymmetric" {
		t.Errorf("SMART capabilities %v", caps)
	}
	if _, ok := doc("/fhir/R4/.well-known/smart-configuration")["capabilities"]; !ok {
		t.Error("the FHIR base's SMART configuration has no capabilities")
	}
}

func TestJWKS(t *testing.T) {
	s := unwired(t)
	resp, err := s.jwks(context.Background(), &bus.Request{})
	if err != nil {
		t.Fatal(err)
	}
	var set struct{ Keys []auth.JWK }
	if err := json.Unmarshal(resp.Body, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 1 || set.Keys[0] != s.signer.Key.PublicJWK() {
		t.Fatalf("keys %+v", set.Keys)
	}
	pub, err := set.Keys[0].PublicKey()
	if err != nil || !pub.Equal(&s.signer.Key.Private.PublicKey) {
		t.Fatalf("the published key is not the signing key's: %v", err)
	}
}
