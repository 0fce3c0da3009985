package authserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/store"
)

// signingKeyDoc and idTokenKeyDoc are the credentials documents holding
// the signing keys: ES256 for access and refresh tokens, RS256 for ID
// tokens. Their fixed ids make creation race-free: of two instances
// starting at once, one inserts and the other reads what it inserted.
const (
	signingKeyDoc = "signing-key"
	idTokenKeyDoc = "id-token-key"
)

type keyDoc struct {
	Kid     string    `json:"kid"`
	PEM     string    `json:"pem"`
	Created time.Time `json:"created"`
}

func (s *Service) signingKey(ctx context.Context) (*auth.Key, error) {
	d, err := s.storedKey(ctx, signingKeyDoc, "signing key", func() (string, string, error) {
		k, err := auth.GenerateKey()
		if err != nil {
			return "", "", err
		}
		pem, err := k.MarshalPrivate()
		return k.ID, pem, err
	})
	if err != nil {
		return nil, err
	}
	return auth.ParsePrivate(d.Kid, d.PEM)
}

func (s *Service) idTokenKey(ctx context.Context) (*auth.RSAKey, error) {
	d, err := s.storedKey(ctx, idTokenKeyDoc, "ID token key", func() (string, string, error) {
		k, err := auth.GenerateRSAKey()
		if err != nil {
			return "", "", err
		}
		pem, err := k.MarshalPrivate()
		return k.ID, pem, err
	})
	if err != nil {
		return nil, err
	}
	return auth.ParseRSAPrivate(d.Kid, d.PEM)
}

// storedKey loads the key kept in doc, or makes one with generate and
// stores it; an instance that loses the race to store reads the winner's.
func (s *Service) storedKey(ctx context.Context, doc, what string, generate func() (kid, pem string, err error)) (keyDoc, error) {
	var d keyDoc
	_, found, err := s.secrets.Load(ctx, doc, &d)
	if err != nil {
		return d, fmt.Errorf("load %s: %w", what, err)
	}
	if found {
		return d, nil
	}
	kid, pem, err := generate()
	if err != nil {
		return d, fmt.Errorf("generate %s: %w", what, err)
	}
	d = keyDoc{Kid: kid, PEM: pem, Created: time.Now().UTC()}
	if err := s.secrets.Swap(ctx, doc, nil, d); err != nil {
		if errors.Is(err, store.ErrExists) {
			return s.storedKey(ctx, doc, what, generate)
		}
		return d, fmt.Errorf("store %s: %w", what, err)
	}
	s.log.Info("generated "+what, "kid", kid)
	return d, nil
}

// jwks publishes both public keys: the gateway and the services verify
// access tokens with the EC key, relying parties ID tokens with the RSA one.
func (s *Service) JWKS(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	keys := []auth.JWK{s.signer.Key.PublicJWK()}
	if s.idSigner != nil {
		keys = append(keys, s.idSigner.RSA.PublicJWK())
	}
	return bus.JSON(200, map[string]any{"keys": keys}), nil
}

// claimsSupported are the claims Pinion issues in ID tokens and at the
// UserInfo endpoint (userinfo.go), and no others.
var claimsSupported = []string{
	"iss", "sub", "aud", "exp", "iat", "auth_time", "nonce", "login_id", "client_id", "fhirUser",
	"name", "given_name", "family_name", "email", "email_verified",
}

// clientAuthMethods are how a client authenticates at the token,
// revocation and introspection endpoints.
var clientAuthMethods = []string{"client_secret_basic", "client_secret_post", "private_key_jwt"}

func (s *Service) Discovery(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := s.cfg.BaseURL
	doc := map[string]any{
		"issuer":                 b,
		"authorization_endpoint": b + "oauth2/authorize",
		"token_endpoint":         b + "oauth2/token",
		"userinfo_endpoint":      b + "oauth2/userinfo",
		"jwks_uri":               b + ".well-known/jwks.json",
		"end_session_endpoint":   b + "oauth2/logout",
		"revocation_endpoint":    b + "oauth2/revoke",
		"introspection_endpoint": b + "oauth2/introspect",
		// RS256 is the default every client may assume (OIDC Discovery
		// §3); ID tokens are signed with it (idtoken.go).
		"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		"grant_types_supported":                 s.grantTypes(),
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"scopes_supported":                      access.SupportedScopes,
		"claims_supported":                      claimsSupported,
		// Omitted, request_uri_parameter_supported means true.
		"request_parameter_supported":                   false,
		"request_uri_parameter_supported":               false,
		"claims_parameter_supported":                    false,
		"token_endpoint_auth_methods_supported":         clientAuthMethods,
		"revocation_endpoint_auth_methods_supported":    clientAuthMethods,
		"introspection_endpoint_auth_methods_supported": clientAuthMethods,
		"code_challenge_methods_supported":              []string{"S256", "plain"},
		// Client assertions (private_key_jwt), assertion.go.
		"token_endpoint_auth_signing_alg_values_supported": assertionAlgs,
	}
	if len(r.Path) >= len("smart-configuration") && r.Path[len(r.Path)-len("smart-configuration"):] == "smart-configuration" {
		doc["capabilities"] = []string{"launch-ehr", "launch-standalone", "client-public", "client-confidential-symmetric", "client-confidential-asymmetric",
			"context-ehr-patient", "context-ehr-encounter", "context-standalone-patient", "context-banner", "context-style",
			"permission-offline", "permission-patient", "permission-user", "permission-v1", "permission-v2", "sso-openid-connect"}
		// SMART 2.x: a server SHALL NOT advertise plain. Medplum's own
		// client reads the OpenID document, which keeps it.
		doc["code_challenge_methods_supported"] = []string{"S256"}
	}
	return bus.JSON(200, doc), nil
}

// SmartStyles is the style sheet a SMART app may follow (smart_style_url
// of the token answer): Medplum's colours.
func (s *Service) SmartStyles(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return bus.JSON(200, map[string]any{
		"color_background": "#edeae3", "color_error": "#9e2d2d", "color_highlight": "#69b5ce",
		"color_modal_backdrop": "", "color_success": "#498e49", "color_text": "#303030",
		"dim_border_radius": "6px", "dim_font_size": "13px", "dim_spacing_size": "20px",
		"font_family_body":    "Georgia, Times, 'Times New Roman', serif",
		"font_family_heading": "'HelveticaNeue-Light', Helvetica, Arial, 'Lucida Grande', sans-serif",
	}), nil
}

// grantTypes are the token endpoint's grant types, in order.
func (s *Service) grantTypes() []string {
	out := make([]string, len(s.grants))
	for i, g := range s.grants {
		out[i] = g.Type()
	}
	return out
}
