// Package registration is how people make their own accounts and
// projects: Medplum's /auth/newuser, /auth/newproject and
// /auth/newpatient, the /register pages that run the same steps in a
// browser, reCAPTCHA, and the account an identity provider's sign-in
// makes (ProviderAccount). Every path shares one set of checks: off when
// registration is, the same limits, and into a project only one that
// lets patients sign up.
package registration

import (
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/limits"
	"github.com/pinion-health/pinion/services/identity/signin"
	"github.com/pinion-health/pinion/services/identity/web"
)

// Config is what registration needs to know.
type Config struct {
	BaseURL string
	// AppBaseURL is the application a person who founded a project is
	// sent to ("" for none).
	AppBaseURL string
	// Disabled turns every registration path off.
	Disabled bool
	// RecaptchaSecret and RecaptchaSiteKey are the server's reCAPTCHA keys
	// ("" for no check); RecaptchaURL verifies tokens.
	RecaptchaSecret, RecaptchaSiteKey, RecaptchaURL string
}

// Service is registration.
type Service struct {
	cfg      Config
	nc       *nats.Conn
	repo     *repo.Repo
	sessions *session.Store
	pages    *web.Pages
	limiter  *limits.SignIns
	accounts *account.Service
	signins  *signin.Service
	clients  *clients.Service
	audit    *audit.Recorder
	log      *slog.Logger
}

// New wires registration.
func New(cfg Config, nc *nats.Conn, r *repo.Repo, sessions *session.Store, pages *web.Pages, limiter *limits.SignIns,
	accounts *account.Service, signins *signin.Service, cl *clients.Service, rec *audit.Recorder, log *slog.Logger) *Service {
	return &Service{cfg: cfg, nc: nc, repo: r, sessions: sessions, pages: pages, limiter: limiter, accounts: accounts,
		signins: signins, clients: cl, audit: rec, log: log}
}
