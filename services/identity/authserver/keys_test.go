package authserver

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/store/sqlstore"
	"github.com/pinion-health/pinion/services/identity/internal/testkit"
	"github.com/pinion-health/pinion/services/identity/secrets"
)

// The ID token key, like the access token key, is made once for all
// instances that start at once, and kept.
func TestIDTokenKeyIsShared(t *testing.T) {
	ctx := context.Background()
	first := storeOnly(t)
	const n = 3
	keys := make([]*auth.RSAKey, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		s := New(first.cfg, first.repo, secrets.New(first.repo), nil, nil, nil, nil, nil, testkit.Quiet)
		wg.Go(func() { keys[i], errs[i] = s.idTokenKey(ctx) })
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
	later, err := New(first.cfg, first.repo, secrets.New(first.repo), nil, nil, nil, nil, nil, testkit.Quiet).idTokenKey(ctx)
	if err != nil || later.ID != keys[0].ID || !later.Private.Equal(keys[0].Private) {
		t.Fatalf("a later start: %v %v", later, err)
	}
	if ec, err := first.signingKey(ctx); err != nil || ec.ID == later.ID {
		t.Fatalf("the access token key %v is the ID token key: %v", ec, err)
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
		s := New(first.cfg, first.repo, secrets.New(first.repo), nil, nil, nil, nil, nil, testkit.Quiet)
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
	later, err := New(first.cfg, first.repo, secrets.New(first.repo), nil, nil, nil, nil, nil, testkit.Quiet).signingKey(ctx)
	if err != nil || later.ID != keys[0].ID || !later.Private.Equal(keys[0].Private) {
		t.Fatalf("a later start: %v %v", later, err)
	}
}

// A stored key that cannot be read stops the start rather than being
// replaced: tokens signed with it would stop verifying.
func TestSigningKeyUnreadable(t *testing.T) {
	s := storeOnly(t)
	ctx := context.Background()
	if err := s.repo.SetSecret(ctx, signingKeyDoc, []byte(`{"kid":`)); err != nil {
		t.Fatal(err)
	}
	if k, err := s.signingKey(ctx); err == nil || !strings.Contains(err.Error(), "load signing key") {
		t.Fatalf("%v %v, want an error", k, err)
	}
	if err := s.secrets.Save(ctx, signingKeyDoc, keyDoc{Kid: "k1", PEM: "not a key"}); err != nil {
		t.Fatal(err)
	}
	if k, err := s.signingKey(ctx); err == nil {
		t.Fatalf("%v, want an error", k)
	}
}

func TestDiscovery(t *testing.T) {
	s := unwired(t)
	doc := func(path string) map[string]any {
		t.Helper()
		resp, err := s.Discovery(context.Background(), &bus.Request{Method: "GET", Path: path})
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
		"revocation_endpoint":    testBase + "oauth2/revoke",
		"introspection_endpoint": testBase + "oauth2/introspect",
		"grant_types_supported":  []any{"client_credentials", "authorization_code", "refresh_token"},
		// What the token endpoint accepts, no more: see the grant and
		// assertion tests.
		"response_types_supported":                         []any{"code"},
		"code_challenge_methods_supported":                 []any{"S256", "plain"},
		"token_endpoint_auth_methods_supported":            []any{"client_secret_basic", "client_secret_post", "private_key_jwt"},
		"token_endpoint_auth_signing_alg_values_supported": []any{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"},
		"revocation_endpoint_auth_methods_supported":       []any{"client_secret_basic", "client_secret_post", "private_key_jwt"},
		"introspection_endpoint_auth_methods_supported":    []any{"client_secret_basic", "client_secret_post", "private_key_jwt"},
		// OIDC Discovery §3: RS256 MUST be listed; ID tokens are signed with it.
		"id_token_signing_alg_values_supported": []any{"RS256", "ES256"},
		// The scopes the token endpoint honours (access.GrantedScope).
		"scopes_supported": []any{"openid", "profile", "email", "fhirUser", "offline_access", "online_access", "launch", "launch/patient",
			"patient/*.rs", "patient/*.cruds", "user/*.rs", "user/*.cruds", "system/*.rs", "system/*.cruds",
			"patient/*.read", "patient/*.write", "patient/*.*", "user/*.read", "user/*.write", "user/*.*",
			"system/*.read", "system/*.write", "system/*.*"},
		// Omitted, request_uri_parameter_supported would mean true.
		"request_uri_parameter_supported": false,
		"request_parameter_supported":     false,
		"claims_parameter_supported":      false,
		// What ID tokens and the UserInfo endpoint carry, and only that.
		"claims_supported": []any{"iss", "sub", "aud", "exp", "iat", "auth_time", "nonce", "login_id", "client_id", "fhirUser",
			"name", "given_name", "family_name", "email", "email_verified"},
	} {
		if !reflect.DeepEqual(oidc[k], want) {
			t.Errorf("%s = %v, want %v", k, oidc[k], want)
		}
	}
	if _, ok := oidc["capabilities"]; ok {
		t.Error("OpenID discovery carries SMART's capabilities")
	}
	smart := doc("/.well-known/smart-configuration")
	if smart["revocation_endpoint"] != testBase+"oauth2/revoke" || smart["introspection_endpoint"] != testBase+"oauth2/introspect" ||
		smart["token_endpoint"] != oidc["token_endpoint"] {
		t.Errorf("SMART configuration: %v", smart)
	}
	// SMART 2.x: a server SHALL NOT advertise plain.
	if got := smart["code_challenge_methods_supported"]; !reflect.DeepEqual(got, []any{"S256"}) {
		t.Errorf("SMART code_challenge_methods_supported %v", got)
	}
	// Both launches and the context each gives (tests/oidc/smart.test.js
	// runs them with fhirclient); no authorize-post: the authorization
	// endpoint's POST is its own pages'.
	caps, _ := smart["capabilities"].([]any)
	want := []any{"launch-ehr", "launch-standalone", "client-public", "client-confidential-symmetric", "client-confidential-asymmetric",
		"context-ehr-patient", "context-ehr-encounter", "context-standalone-patient", "context-banner", "context-style",
		"permission-offline", "permission-patient", "permission-user", "permission-v1", "permission-v2", "sso-openid-connect"}
	if !reflect.DeepEqual(caps, want) {
		t.Errorf("SMART capabilities %v, want %v", caps, want)
	}
	if _, ok := doc("/fhir/R4/.well-known/smart-configuration")["capabilities"]; !ok {
		t.Error("the FHIR base's SMART configuration has no capabilities")
	}
}

// storeOnly is the service over a real SQLite store and nothing else:
// enough for what only reads and writes credentials.
func storeOnly(t *testing.T) *Service {
	t.Helper()
	st, err := sqlstore.Open(context.Background(), filepath.Join(t.TempDir(), "pinion.db"), sqlstore.Options{Sync: "off", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r, err := repo.New(st, nil, repo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return New(Config{BaseURL: "https://pinion.example/"}, r, secrets.New(r), nil, nil, nil, nil, nil, testkit.Quiet)
}

// The key set holds the EC key of access tokens and the RSA key of ID
// tokens, each as RFC 7517 writes it.
func TestJWKS(t *testing.T) {
	s := storeOnly(t)
	if err := s.Start(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	resp, err := s.JWKS(context.Background(), &bus.Request{})
	if err != nil {
		t.Fatal(err)
	}
	var set struct{ Keys []auth.JWK }
	if err := json.Unmarshal(resp.Body, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.Keys) != 2 || set.Keys[0] != s.signer.Key.PublicJWK() || set.Keys[1] != s.idSigner.RSA.PublicJWK() {
		t.Fatalf("keys %+v", set.Keys)
	}
	pub, err := set.Keys[0].PublicKey()
	if err != nil || !pub.Equal(&s.signer.Key.Private.PublicKey) {
		t.Fatalf("the published key is not the signing key's: %v", err)
	}
	rsaPub, err := set.Keys[1].RSAPublicKey()
	if err != nil || !rsaPub.Equal(&s.idSigner.RSA.Private.PublicKey) {
		t.Fatalf("the published RSA key is not the ID token key's: %v", err)
	}
	var raw struct{ Keys []map[string]any }
	_ = json.Unmarshal(resp.Body, &raw)
	if k := raw.Keys[1]; k["kty"] != "RSA" || k["alg"] != "RS256" || k["use"] != "sig" || k["kid"] == "" || k["n"] == nil || k["e"] != "AQAB" || len(k) != 6 {
		t.Errorf("RSA key as published: %v", k)
	}
	if k := raw.Keys[0]; k["kty"] != "EC" || k["alg"] != "ES256" || k["n"] != nil || len(k) != 7 {
		t.Errorf("EC key as published: %v", k)
	}
}
