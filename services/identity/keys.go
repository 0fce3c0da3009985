package identity

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/store"
)

// signingKeyDoc is the credentials document holding the signing key. Its
// fixed id makes creation race-free: of two instances starting at once, one
// inserts and the other reads what it inserted.
const signingKeyDoc = "signing-key"

type keyDoc struct {
	Kid     string    `json:"kid"`
	PEM     string    `json:"pem"`
	Created time.Time `json:"created"`
}

func (s *Service) signingKey(ctx context.Context) (*auth.Key, error) {
	var d keyDoc
	_, found, err := s.loadSecret(ctx, signingKeyDoc, &d)
	if err == nil && !found {
		k, err := auth.GenerateKey()
		if err != nil {
			return nil, err
		}
		pem, err := k.MarshalPrivate()
		if err != nil {
			return nil, err
		}
		d = keyDoc{Kid: k.ID, PEM: pem, Created: time.Now().UTC()}
		if err := s.swapSecret(ctx, signingKeyDoc, nil, d); err != nil {
			if errors.Is(err, store.ErrExists) {
				return s.signingKey(ctx)
			}
			return nil, fmt.Errorf("store signing key: %w", err)
		}
		s.log.Info("generated signing key", "kid", k.ID)
		return k, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load signing key: %w", err)
	}
	return auth.ParsePrivate(d.Kid, d.PEM)
}

func (s *Service) jwks(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	return bus.JSON(200, map[string]any{"keys": []auth.JWK{s.signer.Key.PublicJWK()}}), nil
}

func (s *Service) discovery(ctx context.Context, r *bus.Request) (*bus.Response, error) {
	b := s.cfg.BaseURL
	doc := map[string]any{
		"issuer":                                b,
		"authorization_endpoint":                b + "oauth2/authorize",
		"token_endpoint":                        b + "oauth2/token",
		"userinfo_endpoint":                     b + "oauth2/userinfo",
		"jwks_uri":                              b + ".well-known/jwks.json",
		"end_session_endpoint":                  b + "oauth2/logout",
		"id_token_signing_alg_values_supported": []string{"ES256"},
		"grant_types_supported":                 []string{"client_credentials", "authorization_code", "refresh_token"},
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"scopes_supported":                      []string{"openid", "profile", "email", "offline_access"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post", "private_key_jwt"},
		"code_challenge_methods_supported":      []string{"S256", "plain"},
		// Client assertions (private_key_jwt), assertion.go.
		"token_endpoint_auth_signing_alg_values_supported": assertionAlgs,
	}
	if len(r.Path) >= len("smart-configuration") && r.Path[len(r.Path)-len("smart-configuration"):] == "smart-configuration" {
		doc["capabilities"] = []string{"client-confidential-symmetric", "client-confidential-asymmetric", "context-standalone-patient", "permission-offline", "permission-patient", "permission-user", "sso-openid-connect"}
		doc["revocation_endpoint"] = b + "oauth2/logout"
	}
	return bus.JSON(200, doc), nil
}
