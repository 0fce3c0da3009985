// Package authserver is Pinion's OAuth 2.0 / OpenID Connect authorization
// server, short of its browser pages (package signin): the token
// endpoint, with one Grant per grant_type (grant_*.go; the token exchange
// is package federation's), client authentication (one reader of a
// client's credentials, secrets and private_key_jwt assertions), the
// tokens a sign-in is given, revocation and introspection, userinfo,
// discovery, the signing keys and their JWKS, HTTP Basic on the API (the
// gateway asks) and WebSocket binding tokens. Every refusal is a named
// *Refusal (refusal.go), answered in one place.
package authserver

import (
	"context"
	"log/slog"
	"time"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/consent"
	"github.com/pinion-health/pinion/services/identity/limits"
	"github.com/pinion-health/pinion/services/identity/secrets"
)

// Config is what the authorization server needs to know.
type Config struct {
	// BaseURL is the issuer, and the audience of its access tokens.
	BaseURL       string
	TokenLifetime time.Duration
	// EgressPrivate lets client key sets (jwksUri) be fetched from
	// private addresses (PINION_EGRESS_ALLOW_PRIVATE).
	EgressPrivate bool
}

// Service is the authorization server.
type Service struct {
	cfg        Config
	repo       *repo.Repo
	secrets    *secrets.Store
	sessions   *session.Store
	clients    *clients.Service
	consents   *consent.Store
	limiter    *limits.SignIns
	policies   *access.Policies
	log        *slog.Logger
	assertions *assertions  // client assertions (private_key_jwt)
	signer     *auth.Signer // access and refresh tokens, ES256
	idSigner   *auth.Signer // ID tokens, RS256 (idtoken.go)
	grants     []Grant      // the token endpoint's, in the order discovery names them
	audit      *audit.Recorder
}

// New wires the authorization server; Start loads its keys.
func New(cfg Config, r *repo.Repo, sec *secrets.Store, sessions *session.Store, cl *clients.Service, limiter *limits.SignIns, policies *access.Policies,
	rec *audit.Recorder, log *slog.Logger) *Service {
	if cfg.TokenLifetime == 0 {
		cfg.TokenLifetime = time.Hour
	}
	s := &Service{cfg: cfg, repo: r, secrets: sec, sessions: sessions, clients: cl, limiter: limiter, policies: policies, audit: rec, log: log,
		assertions: newAssertions(cfg.EgressPrivate)}
	s.grants = []Grant{clientCredentials{s}, authorizationCode{s}, refreshToken{s}}
	return s
}

// Start loads or makes the signing keys (shared by every instance), and
// takes the consents the refresh grant checks.
func (s *Service) Start(ctx context.Context, consents *consent.Store) error {
	key, err := s.signingKey(ctx)
	if err != nil {
		return err
	}
	s.signer = &auth.Signer{Key: key, Issuer: s.cfg.BaseURL}
	s.consents = consents
	return s.loadIDSigner(ctx)
}

// Signer signs access and refresh tokens.
func (s *Service) Signer() *auth.Signer { return s.signer }
