// Package membership is the membership service: projects, invitations and
// project memberships — the /admin routes.
package membership

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pinion-health/pinion/pkg/audit"
	"github.com/pinion-health/pinion/pkg/auth"
	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/config"
	"github.com/pinion-health/pinion/pkg/infra"
	"github.com/pinion-health/pinion/pkg/invite"
	"github.com/pinion-health/pinion/pkg/mail"
	"github.com/pinion-health/pinion/pkg/repo"
	"github.com/pinion-health/pinion/pkg/session"
)

// Config is what the membership service needs to know.
type Config struct {
	BaseURL string
	// Mailer sends e-mails from the queue (SMTP, or .eml files).
	Mailer mail.Sender
	// BreachURL is the range API an invite's initial password is checked
	// against too (PINION_PASSWORD_BREACH_URL), as every new password is.
	BreachURL string
}

// Service is the membership service.
type Service struct {
	cfg      Config
	nc       *nats.Conn
	js       jetstream.JetStream
	invites  *invite.Store
	mailer   mail.Sender
	stops    []func()
	repo     *repo.Repo
	sessions *session.Store
	log      *slog.Logger
	svc      *bus.Service
	breach   auth.BreachCheck
	audit    *audit.Recorder
}

// FromConfig builds the service from the settings, as both the standalone
// stack and the service's own process do.
func FromConfig(cfg *config.Config, c *infra.Conns, log *slog.Logger) (*Service, error) {
	mailer, err := mail.FromConfig(cfg.SMTPURL, cfg.DataDir)
	if err != nil {
		return nil, err
	}
	return New(Config{BaseURL: cfg.BaseURL, Mailer: mailer, BreachURL: cfg.PasswordBreachURL}, c.NC, c.JS, c.Repo, c.Sessions, log), nil
}

// New wires the service.
func New(cfg Config, nc *nats.Conn, js jetstream.JetStream, r *repo.Repo, sessions *session.Store, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("service", "membership")
	return &Service{cfg: cfg, nc: nc, js: js, mailer: cfg.Mailer, repo: r, sessions: sessions, log: log,
		breach: auth.BreachCheck{Range: auth.NewBreachRange(cfg.BreachURL), Log: log}, audit: audit.NewRecorder(js)}
}

// Start starts answering requests.
func (s *Service) Start(ctx context.Context) error {
	var err error
	if s.invites, err = invite.Open(ctx, s.js); err != nil {
		return err
	}
	if err := audit.EnsureStream(ctx, s.js); err != nil {
		return err
	}
	stop, err := s.invites.Run(ctx, invite.StepMembership, s.inviteMembership, s.log)
	if err != nil {
		return err
	}
	s.stops = append(s.stops, stop)
	// This service sends the e-mail queue's messages, its own and
	// identity's; pkg/mail does the sending.
	stop, err = mail.NewCourier(s.mailer, s.invites, s.log).Consume(ctx, s.js)
	if err != nil {
		return err
	}
	s.stops = append(s.stops, stop)
	s.svc, err = bus.Serve(s.nc, "membership", "1.0.0", s.audit.Wrap(append([]bus.Endpoint{
		bus.Handle("POST /admin/Project", bus.Token, s.createProject),
		bus.Handle("POST /admin/projects/:projectId/secrets", bus.Token, s.setSecrets),
		bus.Handle("POST /admin/projects/:projectId/sites", bus.Token, s.setSites),
		bus.Handle("POST /admin/projects/:projectId/invite", bus.Token, s.invite),
		bus.Handle("GET /admin/projects/:projectId/members/:membershipId", bus.Token, s.getMember),
		bus.Handle("POST /admin/projects/:projectId/members/:membershipId", bus.Token, s.updateMember),
		bus.Handle("PATCH /admin/projects/:projectId/members/:membershipId", bus.Token, s.patchMember),
		bus.Handle("DELETE /admin/projects/:projectId/members/:membershipId", bus.Token, s.deleteMember),
		bus.Handle("GET /admin/projects/:projectId", bus.Token, s.getProject),
		bus.Handle("POST /fhir/R4/Project/$init", bus.Token, s.initProject),
	}, s.scimEndpoints()...), auditedRoutes, s.log), s.log)
	return err
}

// Stop drains in-flight requests.
func (s *Service) Stop(ctx context.Context) error {
	for _, stop := range s.stops {
		stop()
	}
	if s.svc == nil {
		return nil
	}
	return s.svc.Stop(ctx)
}
