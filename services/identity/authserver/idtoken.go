package authserver

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"

	"github.com/pinion-health/pinion/pkg/auth"
)

// ID tokens are signed RS256 with a key of their own, while access and
// refresh tokens stay ES256: OpenID clients that registered no
// id_token_signed_response_alg (openid-client, go-oidc) accept RS256 only.

// loadIDSigner loads, or makes once for all instances, the ID token key.
func (s *Service) loadIDSigner(ctx context.Context) error {
	k, err := s.idTokenKey(ctx)
	if err != nil {
		return err
	}
	s.idSigner = &auth.Signer{RSA: k, Issuer: s.cfg.BaseURL}
	return nil
}

// signIDToken signs an ID token's claims for the access token's lifetime.
func (s *Service) signIDToken(c *auth.Claims) (string, error) {
	return s.idSigner.Sign(c, s.cfg.TokenLifetime)
}

// idTokenVerifier checks ID tokens this service issued (an id_token_hint):
// RS256 ones, and ES256 ones issued before ID tokens had their own key.
// Their audience is the client, which the caller checks.
func (s *Service) IDTokenVerifier() *auth.Verifier {
	pub := &s.signer.Key.Private.PublicKey
	rpub := &s.idSigner.RSA.Private.PublicKey
	return &auth.Verifier{Issuer: s.cfg.BaseURL,
		Keys: func(kid string) *ecdsa.PublicKey {
			if kid == s.signer.Key.ID {
				return pub
			}
			return nil
		},
		RSAKeys: func(kid string) *rsa.PublicKey {
			if kid == s.idSigner.RSA.ID {
				return rpub
			}
			return nil
		}}
}
