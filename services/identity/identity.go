// Package identity is the identity service, Pinion's OAuth 2.0 / OpenID
// Connect authorization server and its people's accounts. Each capability
// is a package of its own, with a package comment that says what it owns:
//
//   - authserver: the token endpoint (one file per grant), client
//     authentication, revocation, introspection, userinfo, discovery and
//     signing keys, and the HTTP Basic check the gateway asks for;
//   - signin: sign-in for people — /auth/login, the /oauth2/authorize
//     pages, consent, the browser's sign-in, sign-out, /auth/me — and the
//     one gate every sign-in passes (CheckSignIn);
//   - factors: authenticator codes, recovery codes and passkeys;
//   - federation: external OpenID providers, Google, token exchange;
//   - registration: people making their own accounts and projects;
//   - account: users, passwords and their links, e-mail verification, who
//     may change a person's account, and the invite's user and e-mail
//     steps (pkg/invite's Saga);
//   - clients and consent: client applications with their secrets, and
//     people's consents to them;
//   - secrets, limits, web: credential records, sign-in limits, and the
//     server-rendered pages.
//
// This file only wires them: which package serves which route, with what
// it needs passed in.
package identity

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/access"
	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
	"github.com/pinion-health/pinion/services/identity/account"
	"github.com/pinion-health/pinion/services/identity/authserver"
	"github.com/pinion-health/pinion/services/identity/clients"
	"github.com/pinion-health/pinion/services/identity/consent"
	"github.com/pinion-health/pinion/services/identity/factors"
	"github.com/pinion-health/pinion/services/identity/federation"
	"github.com/pinion-health/pinion/services/identity/limits"
	"github.com/pinion-health/pinion/services/identity/registration"
	"github.com/pinion-health/pinion/services/identity/secrets"
	"github.com/pinion-health/pinion/services/identity/signin"
	"github.com/pinion-health/pinion/services/identity/web"
)

// Config is what the identity service needs to know.
type Config struct {
	BaseURL string
	// DataDir, when set, receives superadmin.json with generated credentials.
	DataDir            string
	SuperAdminClientID string
	SuperAdminSecret   string
	TokenLifetime      time.Duration
	// SecretGrace is how long a rotated-out client secret keeps working.
	SecretGrace time.Duration
	// EgressPrivate lets client key sets (jwksUri), identity providers and
	// Google's keys be fetched from private addresses
	// (PINION_EGRESS_ALLOW_PRIVATE).
	EgressPrivate bool
	// RegisterDisabled refuses /auth/newuser (PINION_REGISTER_ENABLED=false);
	// registration is on by default, as Medplum's registerEnabled.
	RegisterDisabled bool
	// RecaptchaSecret, when set, makes registration verify a reCAPTCHA
	// token at RecaptchaURL.
	RecaptchaSecret, RecaptchaURL string
	// RecaptchaSiteKey is the server's own site key; another one a
	// registration names selects a project site's secret.
	RecaptchaSiteKey string
	// BreachURL, when set, is a k-anonymity range API new passwords are
	// checked against (PINION_PASSWORD_BREACH_URL; auth.BreachCheck).
	BreachURL string
	// AppBaseURL is the web app, whose sign-in page an external sign-in
	// returns to (Medplum's appBaseUrl).
	AppBaseURL string
	// GoogleClientID is the server's Google client id (Medplum's
	// googleClientId); GoogleJWKSURL, Google's keys.
	GoogleClientID, GoogleJWKSURL string
}

// Service is the identity service.
type Service struct {
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	accounts *account.Service
	factors  *factors.Service
	limiter  *limits.SignIns
	stopSaga func()
	repo     *repo.Repo
	secrets  *secrets.Store
	sessions *session.Store
	log      *slog.Logger
	svc      *bus.Service
	policies *access.Policies

	clients      *clients.Service
	oauth        *authserver.Service   // the authorization server
	signins      *signin.Service       // sign-in for people
	registration *registration.Service // people making their own accounts and projects
	federation   *federation.Service   // sign-in through other identity providers

	browsers jetstream.KeyValue // signed-in browsers
	consents *consent.Store     // people's consents to clients

	pages *web.Pages      // the browser pages: rendering, cookie, CSRF
	rec   *audit.Recorder // the audit trail, for the routes it records by route

	// SuperAdmin holds the bootstrap result, for the standalone to print.
	SuperAdmin clients.SuperAdmin
}

// FromConfig builds the service from the settings, as both the standalone
// stack and the service's own process do.
func FromConfig(cfg *config.Config, c *infra.Conns, log *slog.Logger) (*Service, error) {
	return New(Config{
		BaseURL: cfg.BaseURL, DataDir: cfg.DataDir,
		SuperAdminClientID: cfg.SuperAdminClientID, SuperAdminSecret: cfg.SuperAdminSecret,
		TokenLifetime: cfg.AccessTokenLifetime, SecretGrace: cfg.ClientSecretGrace,
		EgressPrivate: cfg.EgressPrivate, RegisterDisabled: cfg.RegisterDisabled,
		RecaptchaSecret: cfg.RecaptchaSecretKey, RecaptchaURL: cfg.RecaptchaVerifyURL, RecaptchaSiteKey: cfg.RecaptchaSiteKey,
		AppBaseURL: cfg.AppBaseURL, BreachURL: cfg.PasswordBreachURL,
		GoogleClientID: cfg.GoogleClientID, GoogleJWKSURL: cfg.GoogleJWKSURL,
	}, c.NC, c.JS, c.Repo, c.Sessions, log), nil
}

// New wires the service; Start or Run brings it up.
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, r *repo.Repo, sessions *session.Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	if cfg.TokenLifetime == 0 {
		cfg.TokenLifetime = time.Hour
	}
	if cfg.SecretGrace <= 0 {
		cfg.SecretGrace = 24 * time.Hour
	}
	log = log.With("service", "identity")
	sec := secrets.New(r)
	pages := web.New(cfg.BaseURL, sec)
	limiter := limits.NewSignIns()
	rec := audit.NewRecorder(js)
	accounts := account.New(account.Config{BaseURL: cfg.BaseURL, BreachURL: cfg.BreachURL}, nc, js, r, sec, sessions, pages, log)
	policies := access.NewPolicies(r, log)
	cl := clients.New(clients.Config{BaseURL: cfg.BaseURL, SecretGrace: cfg.SecretGrace, DataDir: cfg.DataDir,
		SuperAdminClientID: cfg.SuperAdminClientID, SuperAdminSecret: cfg.SuperAdminSecret}, nc, js, r, sec, sessions, log)
	s := &Service{
		cfg: cfg, nc: nc, js: js, repo: r, secrets: sec, pages: pages, rec: rec, limiter: limiter, sessions: sessions,
		log: log, policies: policies, clients: cl, accounts: accounts,
		factors: factors.New(factors.Config{BaseURL: cfg.BaseURL}, r, sec, sessions, accounts, limiter, rec, log),
		oauth: authserver.New(authserver.Config{BaseURL: cfg.BaseURL, TokenLifetime: cfg.TokenLifetime, EgressPrivate: cfg.EgressPrivate},
			r, sec, sessions, cl, limiter, policies, rec, log),
	}
	s.signins = signin.New(signin.Config{BaseURL: cfg.BaseURL, RegisterDisabled: cfg.RegisterDisabled}, r, sessions, pages, limiter, accounts,
		s.factors, cl, s.oauth, policies, rec, log)
	s.registration = registration.New(registration.Config{BaseURL: cfg.BaseURL, AppBaseURL: cfg.AppBaseURL, Disabled: cfg.RegisterDisabled,
		RecaptchaSecret: cfg.RecaptchaSecret, RecaptchaSiteKey: cfg.RecaptchaSiteKey, RecaptchaURL: cfg.RecaptchaURL},
		nc, r, sessions, pages, limiter, accounts, s.signins, cl, rec, log)
	s.federation = federation.New(federation.Config{BaseURL: cfg.BaseURL, AppBaseURL: cfg.AppBaseURL, EgressPrivate: cfg.EgressPrivate,
		GoogleClientID: cfg.GoogleClientID, GoogleJWKSURL: cfg.GoogleJWKSURL},
		r, sessions, pages, limiter, accounts, s.factors, cl, s.oauth, s.signins, s.registration, log)
	s.oauth.AddGrant(s.federation.Grant())
	s.signins.Use(s.federation, s.registration)
	return s
}

// Start bootstraps the super admin, opens what the capabilities keep in
// NATS (with the signing keys) and starts answering requests.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.SuperAdmin, err = s.clients.BootstrapSuperAdmin(ctx); err != nil {
		return fmt.Errorf("super-admin bootstrap: %w", err)
	}
	if err := audit.EnsureStream(ctx, s.js); err != nil {
		return err
	}
	if s.consents, err = consent.Open(ctx, s.js, s.sessions); err != nil {
		return err
	}
	if s.browsers, err = s.signins.Start(ctx, s.js, s.consents); err != nil {
		return err
	}
	s.factors.Start(ctx, s.browsers)
	if err := s.oauth.Start(ctx, s.consents); err != nil {
		return err
	}
	if s.stopSaga, err = s.accounts.Start(ctx); err != nil {
		return err
	}
	if err := s.clients.Start(ctx); err != nil {
		return err
	}
	s.svc, err = bus.Serve(s.nc, "identity", "1.0.0", s.rec.Wrap([]bus.Endpoint{
		// Discovery and keys.
		bus.Handle("GET /.well-known/jwks.json", bus.Public, s.oauth.JWKS),
		bus.Handle("GET /.well-known/openid-configuration", bus.Public, s.oauth.Discovery),
		bus.Handle("GET /.well-known/oauth-authorization-server", bus.Public, s.oauth.Discovery),
		bus.Handle("GET /.well-known/smart-configuration", bus.Public, s.oauth.Discovery),
		bus.Handle("GET /fhir/R4/.well-known/smart-configuration", bus.Public, s.oauth.Discovery),
		bus.Handle("GET /.well-known/smart-styles.json", bus.Public, s.oauth.SmartStyles),
		bus.Handle("GET /fhir/R4/.well-known/smart-styles.json", bus.Public, s.oauth.SmartStyles),
		// OAuth 2.0: tokens (RFC 6749), revocation (RFC 7009), introspection
		// (RFC 7662), userinfo, and RP-initiated logout, which a browser
		// posts, or confirms, with no token (Optional).
		bus.Handle("POST /oauth2/token", bus.Public|bus.SignInLimit|bus.NamesApplied, s.oauth.Token),
		bus.Handle("POST /oauth2/revoke", bus.Public|bus.SignInLimit, s.oauth.Revoke),
		bus.Handle("POST /oauth2/introspect", bus.Public|bus.SignInLimit, s.oauth.Introspect),
		bus.Handle("POST /oauth2/logout", bus.Optional|bus.SignInLimit, s.signins.Logout),
		bus.Handle("GET /oauth2/logout", bus.Optional|bus.SignInLimit, s.signins.Logout),
		bus.Handle("GET /oauth2/userinfo", bus.Token, s.oauth.Userinfo),
		bus.Handle("POST /oauth2/userinfo", bus.Token, s.oauth.Userinfo),
		// Medplum's sign-in API.
		bus.Handle("GET /auth/me", bus.Token, s.signins.Me),
		bus.Handle("POST /auth/login", bus.Public|bus.SignInLimit, s.signins.Login),
		bus.Handle("POST /auth/method", bus.Public|bus.SignInLimit, s.federation.Method),
		bus.Handle("POST /auth/profile", bus.Public|bus.SignInLimit, s.signins.ChooseProfile),
		bus.Handle("GET /auth/external", bus.Public|bus.SignInLimit, s.federation.ExternalCallback),
		bus.Handle("POST /auth/google", bus.Public|bus.SignInLimit, s.federation.Google),
		bus.Handle("GET /auth/login/:login", bus.Public|bus.SignInLimit, s.federation.LoginStatus),
		bus.Handle("POST /auth/exchange", bus.Public|bus.SignInLimit, s.federation.Exchange),
		bus.Handle("POST /auth/setpassword", bus.Public|bus.SignInLimit, s.accounts.SetPassword),
		bus.Handle("POST /auth/resetpassword", bus.Public|bus.SignInLimit, s.accounts.ResetPassword),
		bus.Handle("POST /auth/newuser", bus.Public|bus.SignInLimit, s.registration.NewUser),
		bus.Handle("POST /auth/newproject", bus.Public|bus.SignInLimit, s.registration.NewProject),
		bus.Handle("POST /auth/newpatient", bus.Public|bus.SignInLimit, s.registration.NewPatient),
		bus.Handle("POST /auth/verifyemail", bus.Public|bus.SignInLimit, s.accounts.VerifyEmail),
		bus.Handle("POST /auth/revoke", bus.Token, s.signins.AuthRevoke),
		bus.Handle("GET /auth/consents", bus.Token, s.consents.List),
		bus.Handle("DELETE /auth/consents/:clientId", bus.Token, s.consents.Withdraw),
		// Second factors (package factors), Medplum's routes, and the admin's reset.
		bus.Handle("GET /auth/mfa/status", bus.Token, s.factors.Status),
		bus.Handle("POST /auth/mfa/enroll", bus.Token|bus.SignInLimit, s.factors.Enroll),
		bus.Handle("POST /auth/mfa/disable", bus.Token|bus.SignInLimit, s.factors.Disable),
		bus.Handle("POST /auth/mfa/verify", bus.Public|bus.SignInLimit, s.signins.MFAVerify),
		bus.Handle("POST /auth/mfa/login-enroll", bus.Public|bus.SignInLimit, s.signins.MFALoginEnroll),
		bus.Handle("POST /admin/projects/:projectId/members/:membershipId/$reset-mfa", bus.Token, s.factors.Reset),
		bus.Handle("POST /admin/super/setpassword", bus.Token, s.accounts.SuperSetPassword),
		bus.Handle("GET /auth/passkeys", bus.Token, s.factors.Passkeys),
		bus.Handle("POST /auth/passkeys/register/begin", bus.Token, s.factors.RegisterBegin),
		bus.Handle("POST /auth/passkeys/register/finish", bus.Token, s.factors.RegisterFinish),
		bus.Handle("PATCH /auth/passkeys/:id", bus.Token, s.factors.Rename),
		bus.Handle("DELETE /auth/passkeys/:id", bus.Token, s.factors.Remove),
		bus.Handle("GET /admin/projects/:projectId/mfa", bus.Token, s.factors.Overview),
		bus.Handle("GET /passkeys", bus.Public, s.signins.PasskeysPage),
		bus.Handle("GET /consents", bus.Public, s.signins.ConsentsPage),
		bus.Handle("POST /consents", bus.Public|bus.SignInLimit, s.signins.ConsentsPage),
		bus.Handle("POST /passkeys", bus.Public|bus.SignInLimit, s.signins.PasskeysPage),
		// Pages for people in a browser.
		bus.Handle("GET /setpassword/:id/:secret", bus.Public, s.accounts.SetPasswordPage),
		bus.Handle("POST /setpassword/:id/:secret", bus.Public|bus.SignInLimit, s.accounts.SetPasswordPage),
		bus.Handle("GET /verifyemail/:id/:secret", bus.Public, s.accounts.VerifyEmailPage),
		bus.Handle("GET /register", bus.Public, s.registration.AccountPage),
		bus.Handle("POST /register", bus.Public|bus.SignInLimit, s.registration.AccountPage),
		bus.Handle("GET /register/patient/:projectId", bus.Public, s.registration.PatientPage),
		bus.Handle("POST /register/patient/:projectId", bus.Public|bus.SignInLimit, s.registration.PatientPage),
		bus.Handle("GET /register/project", bus.Public, s.registration.ProjectPage),
		bus.Handle("POST /register/project", bus.Public|bus.SignInLimit, s.registration.ProjectPage),
		bus.Handle("POST /verifyemail/:id/:secret", bus.Public|bus.SignInLimit, s.accounts.VerifyEmailPage),
		bus.Handle("GET /resetpassword", bus.Public, s.accounts.ResetPasswordPage),
		bus.Handle("POST /resetpassword", bus.Public|bus.SignInLimit, s.accounts.ResetPasswordPage),
		bus.Handle("GET /oauth2/authorize", bus.Public, s.signins.Authorize),
		bus.Handle("POST /oauth2/authorize", bus.Public|bus.SignInLimit, s.signins.Authorize),
		// Client applications and WebSocket bindings.
		bus.Handle("POST /admin/projects/:projectId/client", bus.Token, s.clients.Create),
		bus.Handle("POST /admin/projects/:projectId/client/:clientId/$rotate-secret", bus.Token, s.clients.RotateSecret),
		bus.Handle("POST /fhir/R4/ClientApplication/:id/$rotate-secret", bus.Token, s.clients.RotateOperation),
		bus.Handle("GET /fhir/R4/Subscription/:id/$get-ws-binding-token", bus.Token, s.oauth.WSBindingToken),
		bus.Handle(bus.SubjBasic, bus.Internal, s.oauth.Basic),
		bus.Handle(bus.SubjTokenRefused, bus.Internal, s.oauth.RefusedBearer),
	}, auditedRoutes, s.log), s.log)
	return err
}

// auditedRoutes are the routes the audit trail records by route
// (audit.Recorder.Wrap): sign-ins by a second factor or a provider,
// refused or let in; sign-out and revocation; changes to a
// person's factors, password and consents, and to client secrets. (A
// password sign-in and the token endpoint record themselves, where who
// signed in is known.)
var auditedRoutes = map[string]audit.Route{
	"POST /auth/mfa/verify":               {Kind: audit.SignIn, Refusals: true},
	"POST /auth/mfa/login-enroll":         {Kind: audit.SignIn, Refusals: true},
	"GET /auth/external":                  {Kind: audit.SignIn, Refusals: true},
	"POST /auth/google":                   {Kind: audit.SignIn, Refusals: true},
	"POST /oauth2/logout":                 {Kind: audit.SignOut},
	"GET /oauth2/logout":                  {Kind: audit.SignOut},
	"POST /oauth2/revoke":                 {Kind: audit.TokenRevoked},
	"POST /auth/revoke":                   {Kind: audit.TokenRevoked},
	"DELETE /auth/consents/:clientId":     {Kind: audit.ConsentEnded},
	"POST /auth/mfa/enroll":               {Kind: audit.MFAEnrolled, Action: "C"},
	"POST /auth/mfa/disable":              {Kind: audit.MFAEnrolled, Action: "D"},
	"POST /auth/passkeys/register/finish": {Kind: audit.MFAEnrolled, Action: "C"},
	"DELETE /auth/passkeys/:id":           {Kind: audit.MFAEnrolled, Action: "D"},
	"POST /auth/setpassword":              {Kind: audit.PasswordSet},
	"POST /admin/super/setpassword":       {Kind: audit.PasswordSet},
	"POST /admin/projects/:projectId/client/:clientId/$rotate-secret": {Kind: audit.SecretRotated},
	"POST /fhir/R4/ClientApplication/:id/$rotate-secret":              {Kind: audit.SecretRotated},
	"POST /admin/projects/:projectId/client":                          {Kind: audit.ConfigChanged, Action: "C"},
}

// Stop drains in-flight requests.
func (s *Service) Stop(ctx context.Context) error {
	s.clients.Stop()
	if s.stopSaga != nil {
		s.stopSaga()
	}
	if s.svc == nil {
		return nil
	}
	return s.svc.Stop(ctx)
}
