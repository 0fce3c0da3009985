// Package factors keeps people's second factors — authenticator codes
// (TOTP) with their recovery codes, and passkeys (WebAuthn) — and decides
// when a sign-in owes one: the person's own, always; a project's
// requirement (a membership's, or the project's setting) when signing in
// to that project; an identity provider's asserted factor where the
// project trusts it. It serves the person's own routes (status, enrol,
// disable, passkeys) and an admin's reset and overview; the sign-in flows
// that ask for a factor are signin's.
package factors

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/fhir"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/limits"
	"github.com/pinion-health/pinion/services/identity/secrets"
)

// Config is what the factors need to know.
type Config struct {
	// BaseURL is the passkeys' relying party: its host their RP id, its
	// origin the one a browser may answer from.
	BaseURL string
}

// Service keeps the second factors.
type Service struct {
	cfg      Config
	repo     *repo.Repo
	secrets  *secrets.Store
	sessions *session.Store
	accounts *account.Service
	limiter  *limits.SignIns
	log      *slog.Logger
	browsers jetstream.KeyValue // passkey ceremonies, one per person or browser
	rp       relyingParty       // made on first use
	audit    *audit.Recorder
}

// New wires the factors; Start gives them the browsers' bucket.
func New(cfg Config, r *repo.Repo, sec *secrets.Store, sessions *session.Store, accounts *account.Service, limiter *limits.SignIns,
	rec *audit.Recorder, log *slog.Logger) *Service {
	return &Service{cfg: cfg, repo: r, secrets: sec, sessions: sessions, accounts: accounts, limiter: limiter, audit: rec, log: log}
}

// Start keeps passkey ceremonies in browsers, the bucket of browser state,
// and warns when the base URL is one passkeys cannot work on: the server
// still starts (a standalone one on 127.0.0.1 is a normal thing to run),
// and the passkey routes say what to change.
func (s *Service) Start(ctx context.Context, browsers jetstream.KeyValue) {
	s.browsers = browsers
	if _, err := s.webAuthn(); err != nil {
		s.log.WarnContext(ctx, "passkeys are off", "err", fhir.AsError(err).Message())
	}
}
