package identity

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
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

// The signing key is made once and kept in the store: instances starting
// at once on an empty store end up with the one key, and a later start
// loads it.
func TestSigningKeyIsShared(t *testing.T) {
	ctx := context.Background()
	first := storeOnly(t)
	const n = 4
	keys := make([]*auth.Key, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		s := New(first.cfg, nil, nil, first.repo, nil, quiet)
		wg.Go(func() { keys[i], errs[i] = s.signingKey(ctx) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if keys[i].ID != keys[0].ID || !keys[i].Private.Equal(keys[0].Private) {
			t.Fatalf("instance %d has key %s, instance 0 %s", i, keys[i].ID, keys[0].ID)
		}
	}
	later, err := New(first.cfg, nil, nil, first.repo, nil, quiet).signingKey(ctx)
	if err != nil || later.ID != keys[0].ID || !later.Private.Equal(keys[0].Private) {
		t.Fatalf("a later start: %v %v", later, err)
	}
}

// A stored key that cannot be read stops the start rather than being
// replaced: tokens signed with it would stop verifying.
func TestSigningKeyUnreadable(t *testing.T) {
	s := storeOnly(t)
	ctx := context.Background()
	if err := s.repo.Store().SetSecret(ctx, signingKeyDoc, []byte(`{"kid":`)); err != nil {
		t.Fatal(err)
	}
	if k, err := s.signingKey(ctx); err == nil || !strings.Contains(err.Error(), "load signing key") {
		t.Fatalf("%v %v, want an error", k, err)
	}
	if err := s.saveSecret(ctx, signingKeyDoc, keyDoc{Kid: "k1", PEM: "not a key"}); err != nil {
		t.Fatal(err)
	}
	if k, err := s.signingKey(ctx); err == nil {
		t.Fatalf("%v, want an error", k)
	}
}
