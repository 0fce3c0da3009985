// Package federation is sign-in through other identity providers:
// external OpenID Connect providers (/auth/external, Medplum's
// /auth/method, and the sign-in page's link to a domain's provider),
// Google (/auth/google), and the exchange of a provider's access token
// for Pinion's tokens (RFC 8693, and Medplum's /auth/exchange). Every ID
// token is verified against the provider's keys; what the provider says
// is trusted only for the project or domain that configured it.
package federation

import (
	"log/slog"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/limits"
	"github.com/pinion-health/pinion/services/identity/registration"
	"github.com/pinion-health/pinion/services/identity/signin"
	"github.com/pinion-health/pinion/services/identity/web"
)

// Config is what federation needs to know.
type Config struct {
	BaseURL string
	// AppBaseURL is the application whose sign-in page finishes a
	// sign-in Medplum's client started without a redirect URI.
	AppBaseURL string
	// EgressPrivate lets requests to providers reach private addresses.
	EgressPrivate bool
	// GoogleClientID is the server's Google client id (Medplum's
	// googleClientId); GoogleJWKSURL, Google's keys.
	GoogleClientID, GoogleJWKSURL string
}

// Service is sign-in through other identity providers.
type Service struct {
	cfg          Config
	repo         *repo.Repo
	sessions     *session.Store
	pages        *web.Pages
	limiter      *limits.SignIns
	accounts     *account.Service
	factors      *factors.Service
	clients      *clients.Service
	oauth        *authserver.Service
	signins      *signin.Service
	registration *registration.Service
	log          *slog.Logger
	verifiers    *verifiers
}

// New wires federation.
func New(cfg Config, r *repo.Repo, sessions *session.Store, pages *web.Pages, limiter *limits.SignIns, accounts *account.Service,
	f *factors.Service, cl *clients.Service, oauth *authserver.Service, signins *signin.Service, reg *registration.Service, log *slog.Logger) *Service {
	return &Service{cfg: cfg, repo: r, sessions: sessions, pages: pages, limiter: limiter, accounts: accounts, factors: f,
		clients: cl, oauth: oauth, signins: signins, registration: reg, log: log,
		verifiers: expirable.NewLRU[string, *oidc.IDTokenVerifier](maxVerifiers, nil, verifierTTL)}
}
