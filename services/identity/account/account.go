// Package account keeps people's accounts: the User resources, their
// passwords (hashes, breach checks, set-password links, resets), their
// e-mail verification, which memberships a person may sign in as, and the
// invite saga's identity steps (the user, then the e-mail with its link).
// It also holds the rule of who may change a person's own security state
// (rule.go), which every route that changes such state asks.
package account

import (
	"context"
	"log/slog"
	"net/mail"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/secrets"
	"github.com/pinion-health/pinion/services/identity/web"
)

// IDNamespace derives the ids the identity service chooses (the
// super-admin project and memberships, client logins, invited users,
// password requests). Never change it: those ids are stored. Membership
// and fhir have their own, for the ids their steps choose.
var IDNamespace = uuid.MustParse("6f1c2a0e-7a44-4d8e-9a55-3c1f0b2d9e11")

// Config is what accounts need to know.
type Config struct {
	BaseURL string
	// BreachURL, when set, is a k-anonymity range API new passwords are
	// checked against (PINION_PASSWORD_BREACH_URL).
	BreachURL string
}

// Service keeps accounts.
type Service struct {
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	repo     *repo.Repo
	secrets  *secrets.Store
	sessions *session.Store
	pages    *web.Pages
	invites  *invite.Store
	breach   auth.BreachCheck
	log      *slog.Logger
}

// New wires accounts; Start runs the invite's steps.
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, r *repo.Repo, sec *secrets.Store, sessions *session.Store, pages *web.Pages, log *slog.Logger) *Service {
	return &Service{cfg: cfg, nc: nc, js: js, repo: r, secrets: sec, sessions: sessions, pages: pages, log: log,
		breach: auth.BreachCheck{Range: auth.NewBreachRange(cfg.BreachURL), Log: log}}
}

// Start opens the invites' records and runs identity's steps of the
// invite saga until the returned stop.
func (s *Service) Start(ctx context.Context) (stop func(), err error) {
	if s.invites, err = invite.Open(ctx, s.js); err != nil {
		return nil, err
	}
	return s.consumeInviteSteps(ctx)
}

// Invites is the invites' records, for the tests of the steps.
func (s *Service) Invites() *invite.Store { return s.invites }

// ValidEmail is the test every sign-in and registration applies to an
// address: one RFC 5322 address with an @.
func ValidEmail(email string) bool {
	_, err := mail.ParseAddress(email)
	return err == nil && strings.Contains(email, "@")
}
