// Package signin is sign-in for people: Medplum's JSON sign-in
// (/auth/login, the choice of profile, the second factor that completes
// it), the authorization endpoint's pages (/oauth2/authorize: sign-in,
// project choice, consent, second factors and passkeys), the browser's
// sign-in they keep, sign-out, the person's passkey page, /auth/me, and
// the one gate every sign-in passes before a membership is used
// (CheckSignIn). External identity providers and registration plug into
// the pages through the Providers and Registration it is given.
package signin

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/consent"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/limits"
	"github.com/pinion-health/pinion/services/identity/web"
)

// Config is what sign-in needs to know.
type Config struct {
	BaseURL string
	// RegisterDisabled hides the sign-in page's link to registration, and
	// sends a person without a project away rather than to found one.
	RegisterDisabled bool
}

// Providers are the identity providers the sign-in page may send an
// address to (package federation): a page linking to the provider of the
// address's domain, or nil when it has none.
type Providers interface {
	Page(ctx context.Context, b web.Browser, a AuthRequest, email string) (*bus.Response, error)
}

// Registration is what the sign-in pages offer for people without an
// account or a project (package registration).
type Registration interface {
	// Link is the registration page for a, for the sign-in page; nil when
	// registration is off.
	Link(a AuthRequest) *web.Register
	// ProjectForm offers a signed-in person without a project to found
	// one, then come back to the request (params).
	ProjectForm(ctx context.Context, b web.Browser, params url.Values, lines []string, name string, errs map[string]string) (*bus.Response, error)
}

// Service is sign-in for people.
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
	policies     *access.Policies
	log          *slog.Logger
	consents     *consent.Store
	browsers     jetstream.KeyValue // signed-in browsers, and their pending second factors
	providers    Providers
	registration Registration
	audit        *audit.Recorder
}

// New wires sign-in; Start opens what it keeps in NATS.
func New(cfg Config, r *repo.Repo, sessions *session.Store, pages *web.Pages, limiter *limits.SignIns, accounts *account.Service,
	f *factors.Service, cl *clients.Service, oauth *authserver.Service, policies *access.Policies, rec *audit.Recorder, log *slog.Logger) *Service {
	return &Service{cfg: cfg, repo: r, sessions: sessions, pages: pages, limiter: limiter, accounts: accounts, factors: f,
		clients: cl, oauth: oauth, policies: policies, audit: rec, log: log}
}

// Use plugs in the identity providers and registration, which are built
// on sign-in and so come after it.
func (s *Service) Use(p Providers, r Registration) { s.providers, s.registration = p, r }

// Start opens the bucket of signed-in browsers (which the factors'
// passkey ceremonies and external sign-ins' starts share) and takes the
// consents the pages ask for.
func (s *Service) Start(ctx context.Context, js jetstream.JetStream, consents *consent.Store) (jetstream.KeyValue, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: BrowserBucket, TTL: BrowserSessionTTL, Description: "signed-in browsers",
	})
	if err != nil {
		return nil, fmt.Errorf("browser sessions: %w", err)
	}
	s.browsers, s.consents = kv, consents
	return kv, nil
}

// Browsers is the bucket of browser state.
func (s *Service) Browsers() jetstream.KeyValue { return s.browsers }
